package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// opTimeout bounds one append or get.
const opTimeout = 60 * time.Second

// clientOps is one simulated caller of a mode. Its functions are called from
// one goroutine at a time.
type clientOps struct {
	append func(ctx context.Context, shard string, recs []*rolloutv1.Record) error
	get    func(ctx context.Context, shard, id string) error // nil: the mode does not read
	close  func()
}

// idRef names an appended record.
type idRef struct{ shard, id string }

// loadSpec is one phase's load: who appends (and reads) what, how much.
type loadSpec struct {
	Name string // "T1 floor", "resident", …
	Mode string
	Path string // how the operations reach storage, in words

	Clients      int
	Shards       []string
	Records      int
	RecordBytes  int
	ReadFraction float64
	// ReadIDs are ids to Get besides those this phase appends.
	ReadIDs []idRef
	// KeepIDs keeps every appended id (Acked returns them), not only a
	// bounded sample for reads.
	KeepIDs bool

	NewClient func(i int) (clientOps, error)
	// Figures reads the counters of the store (or server) this phase
	// drives; nil when there are none.
	Figures func() (serverFigures, error)
	// RSS reads the resident memory of the process that serves the phase;
	// nil when unknown.
	RSS func() float64
	// HTTP counts the HTTP requests and new connections of the Azure
	// clients this phase uses; nil for other stores and remote targets.
	HTTP *httpCounter
	// Settle, after the last operation of a block, keeps sampling sockets
	// this long: connections the blob service closes on its keep-alive
	// timeout become TIME_WAIT only then.
	Settle time.Duration
	// Quiesce, after the last operation of a block, waits this long before
	// the block's counters are read, so that the background work the block
	// started (merges, checkpoints, GC) counts with it and not with the
	// next phase's block. The block's time and rates end before it.
	Quiesce time.Duration
	// Sockets counts this machine's TCP connections to the blob endpoint
	// before, during (once a second, for the peak) and after the phase.
	// Reading /proc/net/tcp costs real CPU when it lists thousands of
	// sockets, so latency phases leave it off.
	Sockets bool
}

// phase runs a loadSpec, possibly in several blocks interleaved with other
// phases, and accumulates its figures.
type phase struct {
	b       *bench
	spec    loadSpec
	clients []clientOps
	acked   [][]idRef // per client: ids it appended (a bounded ring)

	appendLat, getLat histogram
	appends, gets     atomic.Int64
	records           atomic.Int64
	errMu             sync.Mutex
	errs              map[string]int64
	firstErrs         []string

	elapsed  time.Duration
	figures  serverFigures
	haveFigs bool
	// all is what the phase's server did over a whole interleaved stretch
	// (setAll), background work between blocks included.
	all      *serverFigures
	http     struct{ requests, conns int64 }
	sockBase sockets // before the first block
	sockEnd  sockets // after the last block
	sockPeak sockets // the most seen while running
	haveSock bool
	emuCPU   float64 // CPU seconds the emulator used during the blocks
	haveEmu  bool
	cpu      float64 // CPU seconds this process used during the blocks
	rssQ     float64 // RSS when a quarter of the phase was done
	rssEnd   float64
	stopped  string
	notes    []string
	blocks   int
}

const ackedRing = 1024

func (b *bench) newPhase(spec loadSpec) (*phase, error) {
	if b.cfg.relabel != nil {
		spec.Name = b.cfg.relabel(spec.Name)
	}
	p := &phase{b: b, spec: spec, errs: map[string]int64{}, figures: serverFigures{BlobOps: map[string]float64{}}}
	for i := range spec.Clients {
		c, err := spec.NewClient(i)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("%s: client %d: %w", spec.Name, i, err)
		}
		p.clients = append(p.clients, c)
	}
	p.acked = make([][]idRef, spec.Clients)
	return p, nil
}

func (p *phase) close() {
	for _, c := range p.clients {
		if c.close != nil {
			c.close()
		}
	}
	p.clients = nil
}

// one does one operation of client i: a Get of an id appended earlier (with
// probability ReadFraction, once there is one), else an append.
func (p *phase) one(ctx context.Context, i int, rng *rand.Rand) {
	spec := &p.spec
	c := p.clients[i]
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if c.get != nil && spec.ReadFraction > 0 && rng.Float64() < spec.ReadFraction {
		if ref, ok := p.pickRead(i, rng); ok {
			p.timed(ctx, &p.getLat, &p.gets, func() error { return c.get(ctx, ref.shard, ref.id) })
			return
		}
	}
	sh := p.pickShard(i, rng)
	recs := make([]*rolloutv1.Record, spec.Records)
	for k := range recs {
		recs[k] = p.b.newRecord(i)
	}
	if !p.timed(ctx, &p.appendLat, &p.appends, func() error { return c.append(ctx, sh, recs) }) {
		return
	}
	p.records.Add(int64(len(recs)))
	if spec.ReadFraction > 0 || spec.KeepIDs {
		ring := p.acked[i]
		ref := idRef{sh, recs[rng.IntN(len(recs))].GetId()}
		if len(ring) < ackedRing || spec.KeepIDs {
			p.acked[i] = append(ring, ref)
		} else {
			ring[rng.IntN(len(ring))] = ref
		}
	}
}

// timed runs op and counts it: its latency in lat and one more in n, or
// a failure. It reports whether op succeeded.
func (p *phase) timed(ctx context.Context, lat *histogram, n *atomic.Int64, op func() error) bool {
	t0 := time.Now()
	err := op()
	d := time.Since(t0)
	if err != nil {
		p.fail(ctx, err)
		return false
	}
	lat.record(d)
	n.Add(1)
	return true
}

// pickShard spreads clients over shards. With at least as many shards as
// clients, each client owns a disjoint subset (shards i, i+C, …) and picks
// among them at random, so no two clients ever append to one shard at once;
// that keeps per-append writers from fencing each other. With fewer shards
// the clients share them round-robin.
func (p *phase) pickShard(i int, rng *rand.Rand) string {
	sh := p.spec.Shards
	c := len(p.clients)
	if len(sh) < c {
		return sh[i%len(sh)]
	}
	owned := (len(sh) - i + c - 1) / c // shards i, i+c, … below len(sh)
	return sh[i+c*rng.IntN(owned)]
}

func (p *phase) pickRead(i int, rng *rand.Rand) (idRef, bool) {
	own := p.acked[i]
	shared := p.spec.ReadIDs
	n := len(own) + len(shared)
	if n == 0 {
		return idRef{}, false
	}
	k := rng.IntN(n)
	if k < len(own) {
		return own[k], true
	}
	return shared[k-len(own)], true
}

func (p *phase) fail(ctx context.Context, err error) {
	code := errorCode(err)
	p.errMu.Lock()
	defer p.errMu.Unlock()
	p.errs[code]++
	if len(p.firstErrs) < 3 && ctx.Err() == nil {
		p.firstErrs = append(p.firstErrs, err.Error())
	}
}

func (p *phase) note(s string) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	p.notes = append(p.notes, s)
}

func (p *phase) progressLine(frac float64, el time.Duration) string {
	var errs int64
	p.errMu.Lock()
	for _, n := range p.errs {
		errs += n
	}
	p.errMu.Unlock()
	n := p.appends.Load() + p.gets.Load()
	rate := float64(p.appends.Load()) / max((p.elapsed+el).Seconds(), 1e-9)
	var b strings.Builder
	fmt.Fprintf(&b, "%-30s %3.0f%%  %7d ops  %8.0f appends/s  p50 %s",
		p.spec.Name, min(frac, 1)*100, n, rate, fmtDur(p.appendLat.quantile(0.5)))
	if g := p.getLat.count(); g > 0 {
		fmt.Fprintf(&b, "  get p50 %s", fmtDur(p.getLat.quantile(0.5)))
	}
	fmt.Fprintf(&b, "  errors %d", errs)
	if p.haveSock {
		fmt.Fprintf(&b, "  TIME_WAIT %d", p.sockPeak.TimeWait)
	}
	return b.String()
}

// errorCode names an error by its gRPC code. Errors of the in-process modes
// (no gRPC in between) are mapped the way rolloutd's server maps them, and
// prefixed "direct:" so nobody mistakes them for a server's answer.
func errorCode(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	return "direct:" + directCode(err).String()
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(time.Millisecond).String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// acked returns the ids the phase appended (all of them with KeepIDs).
func (p *phase) ackedIDs() []idRef {
	var out []idRef
	for _, a := range p.acked {
		out = append(out, a...)
	}
	return out
}

// reset forgets the figures so far (after a warm-up), keeping the clients
// and what they appended.
func (p *phase) reset() {
	p.appendLat.reset()
	p.getLat.reset()
	p.appends.Store(0)
	p.gets.Store(0)
	p.records.Store(0)
	p.errMu.Lock()
	clear(p.errs)
	p.firstErrs = nil
	p.errMu.Unlock()
	p.elapsed = 0
	p.figures = serverFigures{BlobOps: map[string]float64{}}
	p.haveFigs = false
	p.all = nil
	p.http.requests, p.http.conns = 0, 0
	p.haveSock = false
	p.rssQ, p.rssEnd = 0, 0
	p.emuCPU, p.haveEmu = 0, false
	p.cpu = 0
	p.stopped = ""
	p.blocks = 0
}

// setAll records what the phase's server did over a stretch that spans
// its blocks and everything between them: for a server (or store) that
// serves this phase alone, every blob operation its appends caused.
func (p *phase) setAll(f serverFigures) { p.all = &f }

// counting reads f now, and returns a func that gives the increase since,
// or false when the counters cannot be read (f nil or failing).
func counting(f func() (serverFigures, error)) func() (serverFigures, bool) {
	if f == nil {
		return func() (serverFigures, bool) { return serverFigures{}, false }
	}
	before, err := f()
	return func() (serverFigures, bool) {
		if err != nil {
			return serverFigures{}, false
		}
		after, err := f()
		if err != nil {
			return serverFigures{}, false
		}
		return after.since(before), true
	}
}
