// Command rolloutbench is rolloutd's load generator. It measures the product
// path (a resident, group-committing writer per shard behind one shared blob
// client) against the floor of raw blob operations that any correct design
// needs, and against the writer-per-append design it replaces, in one run,
// and reports ratios: on a shared machine only ratios measured side by side
// mean anything. See docs/performance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/shard"
)

func main() {
	if code, isChild := floorChildExit(); isChild {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "rolloutbench:", err)
		os.Exit(1)
	}
}

// run parses args and runs the benchmark, printing to stdout.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	return runConfig(ctx, cfg, args, stdout, stderr)
}

func runConfig(ctx context.Context, cfg *config, args []string, stdout, stderr io.Writer) (err error) {
	log, err := newLogger(cfg.Verbose)
	if err != nil {
		return err
	}
	stopRecording, err := startRecording(cfg)
	if err != nil {
		return err
	}
	defer stopRecording()
	started := time.Now()
	b := &bench{cfg: cfg, log: log, out: stdout, progress: newProgress(stdout, cfg.Progress), runID: newRunID()}
	defer func() {
		if cerr := b.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	rep := &report{Started: started, Command: append([]string{"rolloutbench"}, args...), Machine: describeMachine()}
	if err := b.setup(ctx); err != nil {
		return err
	}
	rep.Store = b.storeDesc
	if b.store == nil {
		rep.Store = "none (remote target only)"
	}
	rep.Target = "in-process"
	if cfg.Target != "" {
		rep.Target = cfg.Target
	}
	m := rep.Machine
	fmt.Fprintf(stdout, "rolloutbench run %s: target %s, store %s; %d CPUs (%s), load average %s at start\n",
		b.runID, rep.Target, rep.Store, m.NumCPU, m.CPUModel, m.LoadAvg)

	if cfg.Compare {
		rep.Phases, rep.Targets, err = b.compareRun(ctx)
	} else {
		rep.Phases, rep.Ratios, err = b.modeRun(ctx)
	}
	if err != nil && !errors.Is(err, errRows) {
		return err
	}
	// Wrong rows are a bench bug that must not cost the phases measured:
	// the report is written, says so, and the run fails after.
	rowsErr := err
	if rowsErr != nil {
		b.diagnostics = append(b.diagnostics, rowsErr.Error())
	}
	rep.Duration = time.Since(started).Seconds()
	rep.Diagnostics = b.diagnostics
	printReport(stdout, rep, ctx.Err() != nil)
	if cfg.JSON != "" {
		if err := writeJSON(cfg.JSON, rep); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", cfg.JSON)
	}
	return rowsErr
}

// newLogger logs rolloutd's warnings to stderr with -v, else nothing.
func newLogger(verbose bool) (*zap.Logger, error) {
	if !verbose {
		return zap.NewNop(), nil
	}
	zc := zap.NewDevelopmentConfig()
	zc.Level = zap.NewAtomicLevelAt(zapcore.WarnLevel)
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	return zc.Build()
}

// startRecording starts the CPU profile and the execution trace cfg asks
// for; stop ends them, the last started first.
func startRecording(cfg *config) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, rec := range []struct {
		flag, path string
		start      func(io.Writer) error
		stop       func()
	}{
		{"--cpuprofile", cfg.CPUProfile, pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"--trace", cfg.Trace, trace.Start, trace.Stop},
	} {
		if rec.path == "" {
			continue
		}
		s, err := record(rec.path, rec.start, rec.stop)
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", rec.flag, err)
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// printReport writes the phases' table, the ratios or the targets' table,
// and how the run ended.
func printReport(w io.Writer, rep *report, interrupted bool) {
	fmt.Fprintln(w)
	printPhases(w, rep.Phases)
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		printRatios(w, rep.Ratios)
	}
	if len(rep.Targets) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Targets (ratios measured in this run; absolute times are this machine's):")
		printChecks(w, rep.Targets)
		for _, d := range rep.Diagnostics {
			fmt.Fprintln(w, "  "+d)
		}
	}
	fmt.Fprintf(w, "\n%s in %.0fs\n", map[bool]string{true: "interrupted", false: "done"}[interrupted], rep.Duration)
}

// modeRun runs the configured load once per mode, one after the other,
// per-append last (its TIME_WAIT sockets outlive it), and compares each
// with the floor when the floor ran.
func (b *bench) modeRun(ctx context.Context) ([]phaseResult, []modeRatio, error) {
	count, dur := b.cfg.Count, b.cfg.Duration
	if dur > 0 {
		count = 0
	}
	var results []phaseResult
	for _, mode := range runOrder(b.cfg.Modes) {
		if ctx.Err() != nil {
			break
		}
		r, err := b.runMode(ctx, mode, count, dur)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, r)
	}
	return results, modeRatios(results), nil
}

// runOrder sorts modes floors first, per-append last.
func runOrder(modes []string) []string {
	order := map[string]int{modeFloor: 0, modeFloor1: 0, modeFloorFS: 0, modeFloor1FS: 0, modeResidentShard: 1, modeResident: 2, modePerAppend: 3}
	modes = append([]string(nil), modes...)
	for i := range modes { // insertion sort by order: few modes
		for j := i; j > 0 && order[modes[j]] < order[modes[j-1]]; j-- {
			modes[j], modes[j-1] = modes[j-1], modes[j]
		}
	}
	return modes
}

// runMode runs the configured load in one mode.
func (b *bench) runMode(ctx context.Context, mode string, count int64, dur time.Duration) (phaseResult, error) {
	cfg := b.cfg
	shards := shardNames(b.base()+"/"+sanitize(mode), cfg.Shards)
	s := loadSpec{Name: mode, Mode: mode, Clients: cfg.Concurrency, Shards: shards,
		Records: cfg.Records, RecordBytes: cfg.RecordBytes, ReadFraction: cfg.ReadFraction, HTTP: b.http, Sockets: true}
	cleanup, err := b.modeSpec(mode, &s)
	if err != nil {
		return phaseResult{}, err
	}
	defer cleanup()
	b.progress.say("mode %s: %d clients, %d shards, %d×%d B records per append", mode, cfg.Concurrency, cfg.Shards, cfg.Records, cfg.RecordBytes)
	p, err := b.newPhase(s)
	if err != nil {
		return phaseResult{}, err
	}
	if s.ReadFraction != cfg.ReadFraction {
		p.note(fmt.Sprintf("mode %s does not read: --read-fraction ignored", mode))
	}
	p.run(ctx, count, dur)
	p.close()
	return p.result(), nil
}

// modeSpec completes s with how mode reaches storage; cleanup releases
// what serves it.
func (b *bench) modeSpec(mode string, s *loadSpec) (cleanup func(), err error) {
	switch mode {
	case modeFloor, modeFloor1, modeFloorFS, modeFloor1FS:
		return func() {}, b.floorModeSpec(mode, s)
	case modeResidentShard:
		c := newOpCounter()
		pool := newWriterPool(c.wrap(b.store), b.log, shard.Options{})
		s.Path = "resident shard.Writer called directly in-process (no gRPC), on " + b.storeDesc
		s.NewClient, s.Figures, s.RSS = shardClients(pool), c.figures, selfRSS
		s.ReadFraction = 0
		return func() { pool.close(context.Background()) }, nil
	case modeResident:
		res, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
		if err != nil {
			return nil, err
		}
		s.Path = res.path
		s.NewClient, s.Figures, s.RSS = grpcClients(res.conn), res.figures, res.rss
		if b.cfg.Target != "" {
			s.HTTP = nil
		}
		return res.stop, nil
	case modePerAppend:
		c := newOpCounter()
		s.Path = "per append: " + b.perAppendPath()
		s.NewClient, s.Figures = perAppendClients(&perAppendSpec{newStore: b.newStoreForAppend, counter: c, log: b.log}), c.figures
		s.ReadFraction = 0
	}
	return func() {}, nil
}

// floorModeSpec completes s for one of the floors: the generation it
// writes is one append of the configured records.
func (b *bench) floorModeSpec(mode string, s *loadSpec) error {
	recs := make([]*rolloutv1.Record, b.cfg.Records)
	for i := range recs {
		recs[i] = b.newRecord(0)
	}
	gen, err := generationBlob(s.Shards[0], recs)
	if err != nil {
		return err
	}
	switch mode {
	case modeFloor:
		fs := &floorSpec{prefix: b.base() + "/floor/run", readBytes: int64(b.cfg.RecordBytes), generation: gen}
		if fs.manifest, err = freshManifest(); err != nil {
			return err
		}
		c := newOpCounter()
		fs.store = c.wrap(b.store)
		s.Path = "raw blob ops: create-only PUT of the generation + If-Match PUT of the manifest (reads: manifest GET + ranged GET), sequential per client, shared client, on " + b.storeDesc
		s.NewClient, s.Figures = floorClients(fs), c.figures
	case modeFloor1:
		c := newOpCounter()
		fs := &floorSpec{prefix: b.base() + "/floor1/run", generation: gen, store: c.wrap(b.store)}
		s.Path = "raw blob op: one create-only PUT of the generation (no manifest write), per client, shared client, on " + b.storeDesc
		s.NewClient, s.Figures, s.ReadFraction = floor1Clients(fs), c.figures, 0
	case modeFloor1FS:
		dir, err := b.fsFloorDir("mode1")
		if err != nil {
			return err
		}
		s.Path = "plain file operations: write+fsync+rename of the generation, fsync of its directory (no manifest), beside " + b.storeDesc
		s.NewClient, s.ReadFraction = fsFloor1Clients(dir, gen), 0
	case modeFloorFS:
		man, err := freshManifest()
		if err != nil {
			return err
		}
		dir, err := b.fsFloorDir("mode")
		if err != nil {
			return err
		}
		s.Path = "plain file operations: write+fsync+rename of the generation, fsync of its directory, the same for the manifest, beside " + b.storeDesc
		s.NewClient, s.ReadFraction = fsFloorClients(dir, gen, man), 0
	}
	return nil
}

// modeRatios compares every mode with the floor. The ratios' floor: the
// blob operations' floor, else the local store's plain file operations; a
// one-write floor only when no two-write one ran.
func modeRatios(results []phaseResult) []modeRatio {
	var floor *phaseResult
	for _, m := range []string{modeFloor1FS, modeFloor1, modeFloorFS, modeFloor} {
		for i := range results {
			if results[i].Mode == m {
				floor = &results[i]
			}
		}
	}
	if floor == nil {
		return nil
	}
	var ratios []modeRatio
	for _, r := range results {
		if r.Mode == floor.Mode {
			continue
		}
		mr := modeRatio{Mode: r.Mode, P50VsFloor: p50(r) / p50(*floor), P99VsFloor: r.AppendLatency.P99ms / floor.AppendLatency.P99ms,
			RateVsFloor: r.AppendsPerSec / floor.AppendsPerSec}
		if getP50(*floor) > 0 && getP50(r) > 0 {
			mr.GetP50VsRead = getP50(r) / getP50(*floor)
		}
		ratios = append(ratios, mr)
	}
	return ratios
}

func printRatios(w io.Writer, rs []modeRatio) {
	fmt.Fprintln(w, "Ratios to the floor of this run:")
	for _, r := range rs {
		fmt.Fprintf(w, "  %-15s p50 %.2fx  p99 %.2fx  appends/s %.2fx", r.Mode, r.P50VsFloor, r.P99VsFloor, r.RateVsFloor)
		if r.GetP50VsRead > 0 {
			fmt.Fprintf(w, "  get p50 %.2fx the read floor", r.GetP50VsRead)
		}
		fmt.Fprintln(w)
	}
}

// record starts a profile or trace into a new file at path; the returned
// func stops it and closes the file.
func record(path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := start(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		stop()
		_ = f.Close()
	}, nil
}
