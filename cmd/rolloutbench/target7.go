package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// Target 7 (issue 32): what rolloutd's own process spends per append.
// rolloutd runs as a child process (its CPU read from /proc/PID/stat); this
// process generates the load over gRPC, and its own CPU is given beside
// it; the floors run in children of their own. Every load is measured in a
// steady window after a warm-up, in rounds whose medians are the rows; with
// --rolloutd-bin-b two binaries alternate round by round.

// t7Fig is one load's figures in one round.
type t7Fig struct {
	Ops        int64   `json:"ops"`
	ElapsedSec float64 `json:"elapsed_s"`
	P50ms      float64 `json:"p50_ms"`
	// ServerCPU is the rolloutd child's CPU seconds over the load (for a
	// floor: the floor child's own, over its blocks); -1 when unknown.
	ServerCPU float64 `json:"server_cpu_s"`
	// MetricCPU is the same from its process_cpu_seconds_total; -1 unknown.
	MetricCPU float64 `json:"server_cpu_metric_s"`
	// LoadCPU is this process's CPU over the load's blocks; -1 for floors.
	LoadCPU float64 `json:"load_cpu_s"`
	// IdleCPU is the server's CPU seconds per second while idle, over a
	// second just before an interleaved stretch (whose gaps it also
	// spends); 0 when not measured.
	IdleCPU float64 `json:"server_idle_cpu_s_per_s"`
	Errors  int64   `json:"errors"`
}

func (f t7Fig) perOpUS(cpu float64) float64 {
	if f.Ops == 0 || cpu < 0 {
		return math.NaN()
	}
	return cpu * 1e6 / float64(f.Ops)
}

func (f t7Fig) serverUS() float64 { return f.perOpUS(f.ServerCPU) }
func (f t7Fig) rate() float64     { return float64(f.Ops) / f.ElapsedSec }

// t7Round is one round of one binary.
type t7Round struct {
	Wide, One, Single, LocalFloor         t7Fig // the embedded store
	AzSingle, AzInProcess, AzFloor, AzOne t7Fig // Azurite, when Az
	Az                                    bool
}

func runTarget7(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if why := t7Refused(b.cfg); why != "" {
		var rows []targetCheck
		for _, d := range t7RowDefs(sz) {
			rows = append(rows, skipped(d.id, d.what, d.op, d.want, why))
		}
		return &outcome{rows: rows}, nil
	}
	bins, err := b.t7Binaries()
	if err != nil {
		return nil, err
	}
	b.progress.say("target 7: rolloutd as its own process (%d binaries, %d rounds): %d clients over %d shards and on 1, a single client, floors in processes of their own",
		len(bins), sz.T7Rounds, sz.T7Clients, sz.T7Shards)
	rounds := map[string][]t7Round{}
	var phases []phaseResult
	for r := range max(1, sz.T7Rounds) {
		order := slices.Clone(bins)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, bin := range order {
			rnd, ps, err := b.t7Round(ctx, bin, r)
			phases = append(phases, ps...)
			if err != nil {
				return nil, err
			}
			rounds[bin.label] = append(rounds[bin.label], rnd)
		}
	}
	b.diagnostics = append(b.diagnostics, t7Table(sz, b.cfg.T7Azurite, bins, rounds)...)
	if b.cfg.T7Pprof != "" {
		for _, bin := range bins {
			lines, err := b.t7Profile(ctx, bin)
			if err != nil {
				return nil, err
			}
			b.diagnostics = append(b.diagnostics, lines...)
		}
	}
	return &outcome{phases: phases, rows: t7Rows(sz, b.cfg.T7Azurite, rounds["A"], rounds["B"])}, nil
}

// t7Round measures one binary once: the embedded store's loads, then
// Azurite's.
func (b *bench) t7Round(ctx context.Context, bin t7Bin, r int) (t7Round, []phaseResult, error) {
	tag := fmt.Sprintf("T7 %s r%d", bin.label, r+1)
	var rnd t7Round
	ps, err := b.t7Embedded(ctx, bin, tag, r, &rnd)
	if err != nil || !b.cfg.T7Azurite {
		return rnd, ps, err
	}
	az, err := b.t7Azurite(ctx, bin, tag, &rnd)
	return rnd, append(ps, az...), err
}

// t7Embedded: rolloutd on the embedded store: wide and one-shard windows
// (their order alternating by round), then a single client interleaved
// with the local one-write floor's child. Each load has a rolloutd and a
// store of its own, so that no load's background work (merges,
// checkpoints) runs in another's window.
func (b *bench) t7Embedded(ctx context.Context, bin t7Bin, tag string, r int, rnd *t7Round) (_ []phaseResult, err error) {
	sz := b.cfg.sizes
	dir, err := os.MkdirTemp(b.cfg.T7Dir, "rolloutbench-t7-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b.progress.say("%s: embedded store in %s", tag, dir)
	base := fmt.Sprintf("%s/t7%s%d", b.base(), strings.ToLower(bin.label), r)
	count := int64(sz.T7Clients * sz.T7Each)
	wide := t7WindowSpec{name: fmt.Sprintf("%s embedded %d clients, %d shards", tag, sz.T7Clients, sz.T7Shards),
		args: []string{"--store", filepath.Join(dir, "wide")}, clients: sz.T7Clients, shards: shardNames(base+"-wide", sz.T7Shards), count: count}
	one := t7WindowSpec{name: fmt.Sprintf("%s embedded %d clients, 1 shard", tag, sz.T7Clients),
		args: []string{"--store", filepath.Join(dir, "one")}, clients: sz.T7Clients, shards: []string{base + "-one"}, count: count}
	first, second := &wide, &one
	if r%2 == 1 {
		first, second = second, first
	}
	var out []phaseResult
	for _, w := range []*t7WindowSpec{first, second} {
		res, err := b.t7Window(ctx, bin, *w)
		out = append(out, res.phase)
		if err != nil {
			return out, err
		}
		w.fig = res.fig
	}
	rnd.Wide, rnd.One = wide.fig, one.fig
	srv, err := b.startT7Server(bin, nil, "--store", filepath.Join(dir, "single"))
	if err != nil {
		return out, err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()
	set := &phaseSet{b: b}
	defer set.close()
	single, err := set.add(b.t7Spec(tag+" embedded 1 client", srv, 1, []string{base + "-single"}))
	if err != nil {
		return out, err
	}
	floor, err := b.t7Floor(dir, tag+" local floor1 (own process)", envFloorChild+"=fs", envFloorDir+"="+filepath.Join(dir, "floor"))
	if err != nil {
		return out, err
	}
	defer func() { err = errors.Join(err, floor.close()) }()
	warm(ctx, 20, single)
	rnd.Single, rnd.LocalFloor, err = b.t7Alone(ctx, srv, single, floor)
	return append(out, single.result(), floorResult(floor, modeFloor1FS)), err
}

// t7WindowSpec is one many-client window on a rolloutd of its own.
type t7WindowSpec struct {
	name    string
	args    []string // rolloutd's store
	env     []string
	clients int
	shards  []string
	count   int64
	fig     t7Fig
}

type t7WindowResult struct {
	fig   t7Fig
	phase phaseResult
}

// t7Window starts rolloutd, opens every writer and warms up (four appends
// per shard or client), then measures w.count appends as one steady
// window, and stops the server.
func (b *bench) t7Window(ctx context.Context, bin t7Bin, w t7WindowSpec) (res t7WindowResult, err error) {
	srv, err := b.startT7Server(bin, w.env, w.args...)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()
	set := &phaseSet{b: b}
	defer set.close()
	p, err := set.add(b.t7Spec(w.name, srv, w.clients, w.shards))
	if err != nil {
		return res, err
	}
	warm(ctx, int64(4*max(len(w.shards), w.clients)), p)
	res.fig = srv.window(ctx, p, w.count)
	res.phase = p.result()
	return res, nil
}

// t7Azurite: rolloutd on an Azurite of its own: a single client over gRPC
// interleaved with the same writer in this process (no gRPC) and with
// floor1's child, then a one-shard window on a rolloutd of its own.
func (b *bench) t7Azurite(ctx context.Context, bin t7Bin, tag string, rnd *t7Round) (_ []phaseResult, err error) {
	sz := b.cfg.sizes
	b.progress.say("%s: Azurite (HTTP, an instance of its own)", tag)
	inst, err := azurite.StartMain(azurite.Options{ExtentMemoryLimitMB: 1024})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, inst.Stop()) }()
	container, conn := "t7-"+b.runID, envConnectionString+"="+inst.ConnectionString
	out, err := b.t7AzSingle(ctx, bin, tag, inst.ConnectionString, container, rnd)
	if err != nil {
		return out, err
	}
	res, err := b.t7Window(ctx, bin, t7WindowSpec{name: fmt.Sprintf("%s Azurite %d clients, 1 shard", tag, sz.T7Clients),
		args: []string{"--store", "azblob://" + container + "-one"}, env: []string{conn},
		clients: sz.T7Clients, shards: []string{b.base() + "/t7-one"}, count: int64(sz.T7Clients * sz.T7AzEach)})
	rnd.AzOne, rnd.Az = res.fig, err == nil
	return append(out, res.phase), err
}

// t7AzSingle: a single client over gRPC interleaved with the same writer
// in this process (no gRPC) and with floor1's child.
func (b *bench) t7AzSingle(ctx context.Context, bin t7Bin, tag, connStr, container string, rnd *t7Round) (_ []phaseResult, err error) {
	conn := envConnectionString + "=" + connStr
	srv, err := b.startT7Server(bin, []string{conn}, "--store", "azblob://"+container)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()
	store, err := azure.New(ctx, azure.Config{Container: container + "-inproc", ConnectionString: connStr,
		MaxConns: azure.DefaultMaxConns, Logger: b.log.Named("azure")})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	pool := newWriterPool(store, b.log, shard.Options{})
	defer pool.close(context.Background())
	set := &phaseSet{b: b}
	defer set.close()
	inproc := b.spec(tag+" Azurite 1 client, in-process writer", modeResidentShard, "resident shard.Writer in this process (no gRPC), on "+container+"-inproc", 1, []string{b.base() + "/t7-inproc"})
	inproc.NewClient = shardClients(pool)
	ps, err := addPhases(set, b.t7Spec(tag+" Azurite 1 client", srv, 1, []string{b.base() + "/t7-single"}), inproc)
	if err != nil {
		return nil, err
	}
	floor, err := b.t7Floor(b.localTmp(), tag+" Azurite floor1 (own process)", envFloorChild+"=azure", envFloorContainer+"="+container+"-floor", conn)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, floor.close()) }()
	warm(ctx, 20, ps...)
	rnd.AzSingle, rnd.AzFloor, err = b.t7Alone(ctx, srv, ps[0], floor, ps[1])
	rnd.AzInProcess = figOf(ps[1], func() (float64, float64) { return -1, -1 })
	return append(results(ps...), floorResult(floor, modeFloor1)), err
}

func (b *bench) t7Spec(name string, srv *t7Server, clients int, shards []string) loadSpec {
	s := b.spec(name, modeResident, srv.path, clients, shards)
	s.NewClient = grpcClients(srv.conn)
	return s
}

func addPhases(set *phaseSet, specs ...loadSpec) ([]*phase, error) {
	ps := make([]*phase, len(specs))
	for i, s := range specs {
		p, err := set.add(s)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}

func results(ps ...*phase) []phaseResult {
	out := make([]phaseResult, len(ps))
	for i, p := range ps {
		out[i] = p.result()
	}
	return out
}

// t7Floor starts a floor child, writing the generation of one append of
// this run's records, in dir; env says which floor.
func (b *bench) t7Floor(dir, name string, env ...string) (*floorProc, error) {
	gen, err := generationBlob(b.base()+"/t7-floor", []*rolloutv1.Record{b.newRecord(0)})
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "floor-generation-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(gen)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	fp, err := startFloor(name, append(env, envFloorGen+"="+f.Name())...)
	if err != nil {
		return nil, err
	}
	// An empty block: once answered, the child has read the file.
	if err := fp.block(0); err != nil {
		return nil, errors.Join(err, fp.close())
	}
	return fp, nil
}

// localTmp is where target 7 keeps files outside an embedded store.
func (b *bench) localTmp() string {
	if b.cfg.T7Dir != "" {
		return b.cfg.T7Dir
	}
	return os.TempDir()
}

// t7Alone interleaves a single client over gRPC with the floor child (and
// also, in blocks of ten with a pause between), and reads the server's
// CPU over the whole stretch: its background work between blocks counts
// with the appends that caused it.
func (b *bench) t7Alone(ctx context.Context, srv *t7Server, grpc *phase, floor *floorProc, also ...*phase) (single, fl t7Fig, err error) {
	if err := floor.block(20); err != nil {
		return t7Fig{}, t7Fig{}, err
	}
	floor.reset()
	idle := srv.cpuSince()
	pause(ctx, b.cfg.sizes.T7Idle)
	idleCPU, _ := idle()
	runs := []func(int) error{
		func(n int) error { grpc.run(ctx, int64(n), 0); return nil },
		floor.block,
	}
	for _, p := range also {
		runs = append(runs, func(n int) error { p.run(ctx, int64(n), 0); return nil })
	}
	since := srv.cpuSince()
	err = t7Interleave(ctx, b.cfg.sizes.T7Single, runs)
	single = figOf(grpc, since)
	single.IdleCPU = idleCPU
	return single, floorFig(floor), err
}

// t7Interleave runs count operations of each run in blocks of ten,
// rotating their order, with blockGap between blocks (see interleave).
func t7Interleave(ctx context.Context, count int, runs []func(int) error) error {
	blocks := max(1, count/10)
	for r := range blocks {
		n := count / blocks
		if r < count%blocks {
			n++
		}
		for k := range runs {
			if err := runs[(k+r)%len(runs)](n); err != nil {
				return err
			}
			pause(ctx, blockGap)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// floorResult shows a floor child as a phase: its CPU per operation is its
// own process's.
func floorResult(f *floorProc, mode string) phaseResult {
	fig := floorFig(f)
	r := phaseResult{Name: f.name, Mode: mode, Path: "a process of its own (rolloutbench re-executed), one client, start-up excluded",
		Clients: 1, Shards: 1, Records: 1, RecordBytes: 1024, ElapsedSec: fig.ElapsedSec,
		Appends: fig.Ops, AppendLatency: f.lat.summary(), Errors: map[string]int64{}, FirstErrors: f.errs, ErrorsTotal: fig.Errors}
	if fig.ElapsedSec > 0 {
		r.AppendsPerSec = fig.rate()
	}
	if us := fig.serverUS(); !math.IsNaN(us) {
		r.CPUusPerAppend = &us
	}
	if fig.Errors > 0 {
		r.Errors["floor"] = fig.Errors
	}
	return r
}

// t7Refused says why target 7 does not run, or "" when it does. It builds
// and starts rolloutds of its own (and Azurites), minutes of work that a
// plain --compare did not ask for, and it never measures a --target: so it
// runs only when --targets names it, in-process.
func t7Refused(c *config) string {
	switch {
	case c.Target != "":
		return "measures rolloutds it starts itself, never a --target: run it without --target"
	case !slices.Contains(c.Targets, "7"):
		return "runs only when named: --targets 7 (it builds and starts rolloutd processes of its own)"
	}
	return ""
}
