package main

import (
	"context"
	"fmt"
	"math"

	"github.com/rolloutd/rolloutd/internal/shard"
)

// Target 1: a single client appending one 1 KiB record at a time, against
// the floor and against the per-append design.

// t1Results are one run of target1: nil where the run did not measure
// that phase.
type t1Results struct {
	floor, floor1 *phaseResult // the two-write and one-write floors; nil without a store
	shard         *phaseResult // resident shard.Writer in-process; nil unless --inprocess
	grpc          phaseResult  // resident over gRPC
}

// phases lists the results in the order the report shows them.
func (r t1Results) phases() []phaseResult {
	var out []phaseResult
	for _, p := range []*phaseResult{r.floor, r.floor1, r.shard, &r.grpc} {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// t1PerAppend is target 1's per-append stretch, interleaved with the
// resident writer it is compared with.
type t1PerAppend struct {
	resident phaseResult
	fresh    phaseResult // per-append on a new shard each time
	grow     phaseResult // per-append on one shard that keeps growing
}

func runTarget1(ctx context.Context, b *bench) (*outcome, error) {
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	b.progress.say("target 1: single client, 1 record of 1 KiB: floor, resident in-process (shard.Writer), resident over gRPC")
	r, err := b.target1(ctx, "T1", shard.Options{}, "")
	if err != nil {
		return nil, err
	}
	o := &outcome{phases: r.phases(), late: b.target1PerAppend}
	if b.cfg.InProcess && b.cfg.Diagnose {
		d, err := b.target1Diagnostic(ctx)
		if err != nil {
			return nil, err
		}
		o.phases = append(o.phases, d...)
	}
	o.rows = t1Rows(r, b.cfg.InProcess)
	return o, nil
}

// target1Diagnostic is target 1 with merging off in every writer, on an
// Azurite of its own: what the merger's background blob operations cost a
// lone client's latency. Not rolloutd's defaults.
func (b *bench) target1Diagnostic(ctx context.Context) ([]phaseResult, error) {
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	b.progress.say("target 1, diagnostic: the same with merging off (rolloutd --disable-merge), to show what merging costs a lone client")
	d, err := b.target1(ctx, "T1 diag merge-off", shard.Options{DisableBackground: true},
		"diagnostic, not rolloutd's defaults: writers with merging off (shard.Options.DisableBackground; rolloutd --disable-merge); ")
	if err != nil {
		return nil, err
	}
	// In-process always has a store, so the floor ran.
	if d.floor != nil && d.shard != nil {
		f, d1, d2 := *d.floor, *d.shard, d.grpc
		b.diagnostics = append(b.diagnostics, fmt.Sprintf("target 1 with merging off (diagnostic, its own Azurite): resident/floor p50 in-process %.2f, over gRPC %.2f (%s, %s vs %s)",
			p50(d1)/p50(f), p50(d2)/p50(f), ms(p50(d1)), ms(p50(d2)), ms(p50(f))))
	}
	return d.phases(), nil
}

// t1Rows are target 1's rows but 1c (the per-append one, measured last).
func t1Rows(r t1Results, inproc bool) []targetCheck {
	var out []targetCheck
	if r.shard != nil && r.floor != nil {
		shard1, floor := *r.shard, *r.floor
		out = append(out, check("1a", "single client: resident p50 / floor p50, in-process (shard.Writer)",
			p50(shard1)/p50(floor), "<=", 1.2, fmt.Sprintf("%s vs %s", ms(p50(shard1)), ms(p50(floor)))))
	} else {
		out = append(out, skipped("1a", "single client: resident p50 / floor p50, in-process", "<=", 1.2, "needs --inprocess"))
	}
	if r.floor != nil {
		floor := *r.floor
		out = append(out, check("1b", "single client: resident p50 / floor p50, over gRPC",
			p50(r.grpc)/p50(floor), "<=", 1.35, fmt.Sprintf("%s vs %s", ms(p50(r.grpc)), ms(p50(floor)))))
	} else {
		out = append(out, skipped("1b", "single client: resident p50 / floor p50, over gRPC", "<=", 1.35, "the floor needs --store"))
	}
	return append(out, commitByCreate1(r, inproc)...)
}

// commitByCreate1 is target 1's rows for commit by create (issue 21).
func commitByCreate1(r t1Results, inproc bool) []targetCheck {
	var out []targetCheck
	grpc1 := r.grpc
	switch {
	case r.shard != nil && r.floor1 != nil:
		shard1, floor1 := *r.shard, *r.floor1
		out = append(out, check("1d", "commit by create: single client: resident p50 / floor1 p50, in-process (shard.Writer)",
			p50(shard1)/p50(floor1), "<=", 1.25, fmt.Sprintf("%s vs %s", ms(p50(shard1)), ms(p50(floor1)))))
	case !inproc:
		out = append(out, skipped("1d", "commit by create: single client: resident p50 / floor1 p50, in-process", "<=", 1.25, "needs --inprocess"))
	default:
		out = append(out, skipped("1d", "commit by create: single client: resident p50 / floor1 p50, in-process", "<=", 1.25, "the floor needs --store"))
	}
	if r.floor != nil && r.floor1 != nil {
		floor, floor1 := *r.floor, *r.floor1
		out = append(out,
			check("1e", "commit by create: single client: resident p50 over gRPC / two-write floor p50 (1b's figure)",
				p50(grpc1)/p50(floor), "<=", 0.85, fmt.Sprintf("%s vs %s", ms(p50(grpc1)), ms(p50(floor)))),
			reported("1f", "commit by create: single client: resident p50 over gRPC / floor1 p50",
				p50(grpc1)/p50(floor1), fmt.Sprintf("%s vs %s; floor1 / two-write floor %.2f", ms(p50(grpc1)), ms(p50(floor1)), p50(floor1)/p50(floor))))
	} else {
		out = append(out, skipped("1e", "commit by create: single client: resident p50 over gRPC / two-write floor p50", "<=", 0.85, "the floor needs --store"),
			reported("1f", "commit by create: single client: resident p50 over gRPC / floor1 p50", math.NaN(), "the floor needs --store"))
	}
	if grpc1.AllWritesPerAppend != nil {
		out = append(out, check("1g", "commit by create: single client: blob PUTs per acked append, everything included (gRPC phase's server)",
			*grpc1.AllWritesPerAppend, "<=", 1.15, fmt.Sprintf("%.2f DELETEs per acked append; %d appends; the server's counters from before the first block to a settle after the last",
				*grpc1.AllDeletesPerAppend, grpc1.Appends)))
	} else {
		out = append(out, skipped("1g", "commit by create: single client: blob PUTs per acked append", "<=", 1.15, "the target's /metrics could not be read"))
	}
	return out
}

// target1PerAppend is target 1's row 1c: the replaced design, measured
// after every target's resident phases.
func (b *bench) target1PerAppend(ctx context.Context) (*outcome, error) {
	if b.store == nil {
		return &outcome{rows: []targetCheck{skipped("1c", "single client: per-append p50 / resident p50", ">=", 2.0, "per-append needs --store")}}, nil
	}
	b.progress.say("target 1, per-append: the replaced design, single client, interleaved with resident")
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	pa, err := b.perAppendSingle(ctx)
	if err != nil {
		return nil, err
	}
	return &outcome{
		phases: []phaseResult{pa.resident, pa.fresh, pa.grow},
		rows: []targetCheck{check("1c", "single client: per-append p50 / resident p50 over "+b.storeDesc+" (per-append on a new shard each time: its lower bound)",
			p50(pa.fresh)/p50(pa.resident), ">=", 2.0,
			fmt.Sprintf("%s vs %s; on one growing shard: %s (%.1fx)", ms(p50(pa.fresh)), ms(p50(pa.resident)), ms(p50(pa.grow)), p50(pa.grow)/p50(pa.resident)))},
	}, nil
}

// target1 measures a single client appending one 1 KiB record at a time:
// the floor, a resident shard.Writer called in-process, and the resident
// path over gRPC, interleaved. Writers use wopts (the zero value:
// rolloutd's defaults). Phases are named prefix+" floor", " floor1",
// " resident in-process", " resident gRPC".
func (b *bench) target1(ctx context.Context, prefix string, wopts shard.Options, pathNote string) (t1Results, error) {
	sz, store, inproc := b.cfg.sizes, b.store, b.cfg.InProcess
	base := b.base() + "/" + sanitize(prefix)
	res, err := b.residentWith(store, b.cfg.MaxWriters, b.target, wopts)
	if err != nil {
		return t1Results{}, err
	}
	defer res.stop()
	set := &phaseSet{b: b}
	defer set.close()
	var t1 []*phase // in the order of the interleaved blocks
	refShard := base + "-grpc"
	var shardP, floorP, floor1P *phase
	if inproc {
		c := newOpCounter()
		pool := newWriterPool(c.wrap(store), b.log, wopts)
		defer pool.close(ctx)
		refShard = base + "-shard"
		s := b.spec(prefix+" resident in-process", modeResidentShard, pathNote+"resident shard.Writer called directly in-process (no gRPC), on "+b.storeDesc, 1, []string{refShard})
		s.NewClient, s.Figures, s.HTTP = shardClients(pool), c.figures, b.http
		if shardP, err = set.add(s); err != nil {
			return t1Results{}, err
		}
		t1 = append(t1, shardP)
	}
	s := b.spec(prefix+" resident gRPC", modeResident, pathNote+res.path, 1, []string{base + "-grpc"})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	if inproc {
		s.HTTP = b.http
	}
	grpcP, err := set.add(s)
	if err != nil {
		return t1Results{}, err
	}
	t1 = append(t1, grpcP)
	warm(ctx, 20, t1...)
	if store != nil {
		if floorP, floor1P, err = b.target1Floors(ctx, set, prefix, base, refShard); err != nil {
			return t1Results{}, err
		}
		warm(ctx, 20, floorP, floor1P)
		t1 = append([]*phase{floorP, floor1P}, t1...)
	}
	// The gRPC phase's server serves it alone: its counters over the whole
	// interleaved stretch, and a settle after it, hold every blob operation
	// its appends caused, the background work between blocks included.
	all := counting(res.figures)
	interleave(ctx, int64(sz.SingleAppends), sz.SingleAppends/10, t1...)
	pause(ctx, sz.Quiesce)
	if f, ok := all(); ok {
		grpcP.setAll(f)
	}
	return t1Results{floor: resultOf(floorP), floor1: resultOf(floor1P), shard: resultOf(shardP), grpc: grpcP.result()}, nil
}

// target1Floors builds target 1's two floors. The two-write floor's
// manifest is the product shard's real one, as it is after the warm-up;
// its generation is one append's. The one-write floor of a commit by
// create writes the same generation, its create-only PUT alone.
func (b *bench) target1Floors(ctx context.Context, set *phaseSet, prefix, base, refShard string) (floor, floor1 *phase, err error) {
	fs, err := b.floorFor(ctx, base+"/floor", refShard)
	if err != nil {
		return nil, nil, err
	}
	c := newOpCounter()
	fs.store = c.wrap(b.store)
	s := b.spec(prefix+" floor", modeFloor, "raw blob ops: create-only PUT of the generation + If-Match PUT of the manifest, sequential, shared client, on "+b.storeDesc, 1, []string{refShard})
	s.NewClient, s.Figures, s.HTTP = floorClients(fs), c.figures, b.http
	if floor, err = set.add(s); err != nil {
		return nil, nil, err
	}
	c1 := newOpCounter()
	fs1 := &floorSpec{store: c1.wrap(b.store), prefix: base + "/floor1", generation: fs.generation}
	s = b.spec(prefix+" floor1", modeFloor1, "raw blob op: one create-only PUT of the generation (no manifest write), shared client, on "+b.storeDesc, 1, []string{refShard})
	s.NewClient, s.Figures, s.HTTP = floor1Clients(fs1), c1.figures, b.http
	if floor1, err = set.add(s); err != nil {
		return nil, nil, err
	}
	return floor, floor1, nil
}

// perAppendSingle measures the replaced design with one client, interleaved
// with the resident writer it is compared with: per-append on a new shard
// each time (the least it can cost) and on one shard that keeps growing.
func (b *bench) perAppendSingle(ctx context.Context) (t1PerAppend, error) {
	sz := b.cfg.sizes
	base := b.base()
	resP, stop, err := b.perAppendResident(ctx, base+"/t1pa-resident")
	if err != nil {
		return t1PerAppend{}, err
	}
	defer stop()
	counter := newOpCounter()
	pa := &perAppendSpec{newStore: b.newStoreForAppend, counter: counter, log: b.log}
	paths := "per append: " + b.perAppendPath()
	fresh := *pa
	fresh.freshShard = func(client, n int) string { return fmt.Sprintf("%s/pa1-%d-%d", base, client, n) }
	s := b.spec("T1 per-append, new shard each", modePerAppend, paths+"; each append to a shard never written before", 1, []string{base + "/unused"})
	s.NewClient, s.Figures, s.HTTP = perAppendClients(&fresh), counter.figures, b.http
	freshP, err := b.newPhase(s)
	if err != nil {
		return t1PerAppend{}, err
	}
	defer freshP.close()
	grow := *pa
	s = b.spec("T1 per-append, one shard", modePerAppend, paths+"; every append to the same shard, whose live generations grow (no resident merger)", 1, []string{base + "/t1pa-grow"})
	s.NewClient, s.Figures, s.HTTP = perAppendClients(&grow), counter.figures, b.http
	growP, err := b.newPhase(s)
	if err != nil {
		return t1PerAppend{}, err
	}
	defer growP.close()
	warm(ctx, 10, resP, freshP)
	interleave(ctx, int64(sz.PerAppendOps), sz.PerAppendOps/5, resP, freshP, growP)
	return t1PerAppend{resident: resP.result(), fresh: freshP.result(), grow: growP.result()}, nil
}

// perAppendResident is the resident phase the per-append design is
// compared with: a shard.Writer in-process, else the target over gRPC.
// stop closes the phase and what serves it.
func (b *bench) perAppendResident(ctx context.Context, sh string) (*phase, func(), error) {
	if b.cfg.InProcess {
		c := newOpCounter()
		pool := newWriterPool(c.wrap(b.store), b.log, shard.Options{})
		s := b.spec("T1 resident in-process (vs per-append)", modeResidentShard, "resident shard.Writer called directly in-process, on "+b.storeDesc, 1, []string{sh})
		s.NewClient, s.Figures, s.HTTP = shardClients(pool), c.figures, b.http
		p, err := b.newPhase(s)
		if err != nil {
			pool.close(ctx)
			return nil, nil, err
		}
		return p, func() { p.close(); pool.close(ctx) }, nil
	}
	res, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return nil, nil, err
	}
	s := b.spec("T1 resident gRPC (vs per-append)", modeResident, res.path, 1, []string{sh})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	p, err := b.newPhase(s)
	if err != nil {
		res.stop()
		return nil, nil, err
	}
	return p, func() { p.close(); res.stop() }, nil
}
