package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// targetCheck is one target of docs/performance.md's targets table, measured.
type targetCheck struct {
	ID     string   `json:"id"`
	What   string   `json:"what"`
	Value  *float64 `json:"value,omitempty"` // nil: not measured in this run
	Op     string   `json:"op"`              // "<=", ">=", ">", "=="
	Want   float64  `json:"want"`
	Met    *bool    `json:"met,omitempty"`
	Detail string   `json:"detail,omitempty"`
}

func check(id, what string, v float64, op string, want float64, detail string) targetCheck {
	t := targetCheck{ID: id, What: what, Op: op, Want: want, Detail: detail}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		t.Detail = strings.TrimSpace("not measurable (" + fmt.Sprint(v) + "). " + detail)
		return t
	}
	t.Value = &v
	var met bool
	switch op {
	case "<=":
		met = v <= want
	case ">=":
		met = v >= want
	case ">":
		met = v > want
	case "==":
		met = v == want
	}
	t.Met = &met
	return t
}

// reported is a figure the targets' table shows without a bound; a nil
// value prints as n/a.
func reported(id, what string, v float64, detail string) targetCheck {
	t := targetCheck{ID: id, What: what, Op: "report", Detail: detail}
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		t.Value = &v
	}
	return t
}

func skipped(id, what, op string, want float64, why string) targetCheck {
	return targetCheck{ID: id, What: what, Op: op, Want: want, Detail: "not measured: " + why}
}

// resident is the product path over gRPC for one phase: an in-process
// server of its own over the shared store, or the remote --target.
type resident struct {
	conn    *client.Client
	figures func() (serverFigures, error)
	rss     func() float64
	path    string
	stop    func()
}

func (b *bench) resident(store blob.Store, maxWriters int, target *client.Client) (*resident, error) {
	return b.residentWith(store, maxWriters, target, shard.Options{})
}

// residentWith is resident with writer options other than rolloutd's
// defaults (in-process only: a remote target has its own).
func (b *bench) residentWith(store blob.Store, maxWriters int, target *client.Client, wopts shard.Options) (*resident, error) {
	if b.cfg.Target != "" {
		r := &resident{conn: target, stop: func() {}, path: "remote rolloutd " + b.cfg.Target + " over gRPC (Go client package, retries off)"}
		if target == b.getTarget && b.cfg.GetTarget != "" {
			r.path = "remote rolloutd " + b.cfg.GetTarget + " over gRPC (Go client package, retries off)"
		}
		if b.scrape != nil {
			r.figures = func() (serverFigures, error) { return figuresOf(b.scrape) }
			r.rss = func() float64 {
				f, err := figuresOf(b.scrape)
				if err != nil {
					return 0
				}
				return f.RSS
			}
		}
		return r, nil
	}
	s, err := b.startServer(store, maxWriters, wopts)
	if err != nil {
		return nil, err
	}
	return &resident{
		conn: s.conn, figures: s.figures, rss: selfRSS, stop: s.stop,
		path: fmt.Sprintf("in-process rolloutd server (internal/server, max-writers %d) over loopback gRPC (Go client package, retries off), on %s", maxWriters, b.storeDesc),
	}, nil
}

func (b *bench) base() string { return "rb-" + b.runID }

func (b *bench) spec(name, mode, path string, clients int, shards []string) loadSpec {
	return loadSpec{Name: name, Mode: mode, Path: path, Clients: clients, Shards: shards, Records: 1, RecordBytes: len(b.content)}
}

// warm runs n operations of each phase and forgets their figures: writers
// open, connections pool, caches fill.
func warm(ctx context.Context, n int64, ps ...*phase) {
	for _, p := range ps {
		p.run(ctx, n, 0)
		p.reset()
	}
}

// interleave runs the phases' count operations each in rounds, rotating
// their order, so that the machine's noise falls on all of them alike.
//
// Blocks are several operations long, with a pause between them, and not
// one operation each: a resident writer merges in the background after its
// commits, and with strict alternation that work lands on whatever runs
// next. On Azurite, which serves one request at a time, the floor then pays
// for the writer's merges (measured here: single-client resident/floor
// 1.06 with one-operation blocks against 2.87 with ten-operation blocks in
// back-to-back runs), which flatters the writer.
func interleave(ctx context.Context, count int64, rounds int, ps ...*phase) {
	rounds = max(1, min(rounds, int(count)))
	for r := range rounds {
		n := count / int64(rounds)
		if r < int(count%int64(rounds)) {
			n++
		}
		for k := range ps {
			ps[(k+r)%len(ps)].run(ctx, n, 0)
			pause(ctx, blockGap)
		}
	}
}

// blockGap lets the background work a block started (merges) finish
// before the next block, of another phase, starts.
const blockGap = 50 * time.Millisecond

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func p50(r phaseResult) float64    { return r.AppendLatency.P50ms }
func getP50(r phaseResult) float64 { return r.GetLatency.P50ms }

// compareRun runs the targets' phases in the order their figures need:
// per-append phases last, because their TIME_WAIT sockets outlive them by a
// minute and would count against the resident phases.
func (b *bench) compareRun(ctx context.Context) ([]phaseResult, []targetCheck, error) {
	var (
		results []phaseResult
		checks  []targetCheck
		sz      = b.cfg.sizes
		base    = b.base()
		inproc  = b.cfg.InProcess
		store   = b.store
	)
	add := func(ps ...*phase) []phaseResult {
		var rs []phaseResult
		for _, p := range ps {
			r := p.result()
			rs = append(rs, r)
			results = append(results, r)
		}
		return rs
	}
	say := b.progress.say
	var t2 *phaseResult // target 2's resident figures, for the per-append comparison
	b.diagnostics = nil
	diagnostics := &b.diagnostics

	// --- Target 1: single client, one 1 KiB record. ---
	if b.want("1") {
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		store = b.store
		say("target 1: single client, 1 record of 1 KiB: floor, resident in-process (shard.Writer), resident over gRPC")
		rs, err := b.target1(ctx, "T1", shard.Options{}, "")
		if err != nil {
			return nil, nil, err
		}
		results = append(results, rs...)
		if inproc && b.cfg.Diagnose {
			// The same, with merging off in every writer, on an Azurite of
			// its own: what the merger's background blob operations cost a
			// lone client's latency. Not rolloutd's defaults.
			if err := b.fresh(ctx); err != nil {
				return nil, nil, err
			}
			say("target 1, diagnostic: the same with merging off (rolloutd --disable-merge), to show what merging costs a lone client")
			drs, err := b.target1(ctx, "T1 diag merge-off", shard.Options{DisableBackground: true},
				"diagnostic, not rolloutd's defaults: writers with merging off (shard.Options.DisableBackground; rolloutd --disable-merge); ")
			if err != nil {
				return nil, nil, err
			}
			results = append(results, drs...)
			f, _ := byName(drs, "T1 diag merge-off floor")
			d1, _ := byName(drs, "T1 diag merge-off resident in-process")
			d2, _ := byName(drs, "T1 diag merge-off resident gRPC")
			*diagnostics = append(*diagnostics, fmt.Sprintf("target 1 with merging off (diagnostic, its own Azurite): resident/floor p50 in-process %.2f, over gRPC %.2f (%s, %s vs %s)",
				p50(d1)/p50(f), p50(d2)/p50(f), ms(p50(d1)), ms(p50(d2)), ms(p50(f))))
		}
		floor1, haveFloor := byName(rs, "T1 floor")
		if shard1, ok := byName(rs, "T1 resident in-process"); ok && haveFloor {
			checks = append(checks, check("1a", "single client: resident p50 / floor p50, in-process (shard.Writer)",
				p50(shard1)/p50(floor1), "<=", 1.2, fmt.Sprintf("%s vs %s", ms(p50(shard1)), ms(p50(floor1)))))
		} else {
			checks = append(checks, skipped("1a", "single client: resident p50 / floor p50, in-process", "<=", 1.2, "needs --inprocess"))
		}
		grpc1, _ := byName(rs, "T1 resident gRPC")
		if haveFloor {
			checks = append(checks, check("1b", "single client: resident p50 / floor p50, over gRPC",
				p50(grpc1)/p50(floor1), "<=", 1.35, fmt.Sprintf("%s vs %s", ms(p50(grpc1)), ms(p50(floor1)))))
		} else {
			checks = append(checks, skipped("1b", "single client: resident p50 / floor p50, over gRPC", "<=", 1.35, "the floor needs --store"))
		}
		checks = append(checks, commitByCreate1(rs, inproc)...)
	}

	// --- Target 2: 32 clients, 5,000 appends over 32 shards, resident. ---
	if b.want("2") {
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		store = b.store
		say("target 2: %d clients, %d appends over %d shards, resident (TIME_WAIT counted before any per-append phase)", sz.ManyClients, sz.ManyAppends, sz.ManyClients)
		res, err := b.resident(store, b.cfg.MaxWriters, b.target)
		if err != nil {
			return nil, nil, err
		}
		{
			s := b.spec(fmt.Sprintf("T2 resident %d clients", sz.ManyClients), modeResident, res.path, sz.ManyClients, shardNames(base+"/t2", sz.ManyClients))
			s.NewClient, s.Figures, s.RSS, s.Sockets, s.Settle = grpcClients(res.conn), res.figures, res.rss, true, sz.Settle
			if inproc {
				s.HTTP = b.http
			}
			p, err := b.newPhase(s)
			if err != nil {
				return nil, nil, err
			}
			p.run(ctx, sz.ManyAppends, 0)
			p.close()
			t2 = &add(p)[0]
		}
		res.stop()
	}

	// --- Target 3: 64 clients on one shard. ---
	if b.want("3") {
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		store = b.store
		say("target 3: %d clients on one shard vs one client, and the floor's raw blob ops/s at %d clients", sz.OneShardConc, sz.OneShardConc)
		res, err := b.resident(store, b.cfg.MaxWriters, b.target)
		if err != nil {
			return nil, nil, err
		}
		var single3, many3, floor3 *phase
		var rs []phaseResult
		{
			sh := []string{base + "/t3"}
			// Both resident phases share the server: each block's
			// background work is waited for, so that it counts with the
			// block that caused it.
			s := b.spec("T3 resident 1 client", modeResident, res.path, 1, sh)
			s.NewClient, s.Figures, s.Quiesce = grpcClients(res.conn), res.figures, sz.Quiesce
			if single3, err = b.newPhase(s); err != nil {
				return nil, nil, err
			}
			s = b.spec(fmt.Sprintf("T3 resident %d clients", sz.OneShardConc), modeResident, res.path, sz.OneShardConc, sh)
			s.NewClient, s.Figures, s.Quiesce = grpcClients(res.conn), res.figures, sz.Quiesce
			if many3, err = b.newPhase(s); err != nil {
				return nil, nil, err
			}
			warm(ctx, 10, single3)
			ps := []*phase{single3, many3}
			if store != nil {
				fs, err := b.floorFor(ctx, base+"/floor/t3", "")
				if err != nil {
					return nil, nil, err
				}
				c := newOpCounter()
				fs.store = c.wrap(store)
				s := b.spec(fmt.Sprintf("T3 floor %d clients", sz.OneShardConc), modeFloor, "raw blob ops as in T1, each client on its own manifest, shared client", sz.OneShardConc, sh)
				s.NewClient, s.Figures, s.HTTP = floorClients(fs), c.figures, b.http
				if floor3, err = b.newPhase(s); err != nil {
					return nil, nil, err
				}
				ps = append(ps, floor3)
			}
			for range 2 {
				single3.run(ctx, int64(sz.OneShardSingle/2), 0)
				many3.run(ctx, int64(sz.OneShardConc*sz.OneShardEach/2), 0)
				if floor3 != nil {
					floor3.run(ctx, int64(sz.OneShardConc*sz.OneShardEach/4), 0)
				}
			}
			rs = add(ps...)
			for _, p := range ps {
				p.close()
			}
		}
		res.stop()
		{
			single, many := rs[0], rs[1]
			checks = append(checks, check("3a", fmt.Sprintf("%d clients on one shard: appends/s / single client's", sz.OneShardConc),
				many.AppendsPerSec/single.AppendsPerSec, ">=", 10, fmt.Sprintf("%.0f/s vs %.0f/s", many.AppendsPerSec, single.AppendsPerSec)))
			if many.WritesPerAppend != nil {
				checks = append(checks, check("3b", fmt.Sprintf("%d clients on one shard: blob writes per acked append", sz.OneShardConc),
					*many.WritesPerAppend, "<=", 0.25, fmt.Sprintf("%.0f PUTs for %d appends", many.BlobOps["put"]+many.BlobOps["put_create"]+many.BlobOps["put_cas"], many.Appends)))
			} else {
				checks = append(checks, skipped("3b", "blob writes per acked append", "<=", 0.25, "the target's /metrics could not be read"))
			}
			if floor3 != nil && rs[2].BlobOpsPerSec != nil {
				fops := *rs[2].BlobOpsPerSec
				checks = append(checks, check("3c", fmt.Sprintf("%d clients on one shard: appends/s / the floor's raw blob ops/s", sz.OneShardConc),
					many.AppendsPerSec/fops, ">", 1, fmt.Sprintf("%.0f appends/s vs %.0f blob ops/s", many.AppendsPerSec, fops)),
					check("3d", fmt.Sprintf("commit by create: %d clients on one shard: appends/s / the floor's raw blob ops/s (3c's figure)", sz.OneShardConc),
						many.AppendsPerSec/fops, ">=", 8, fmt.Sprintf("%.0f appends/s vs %.0f blob ops/s", many.AppendsPerSec, fops)))
			} else {
				checks = append(checks, skipped("3c", "appends/s / the floor's raw blob ops/s", ">", 1, "the floor needs --store"),
					skipped("3d", "commit by create: appends/s / the floor's raw blob ops/s", ">=", 8, "the floor needs --store"))
			}
			if many.WritesPerAppend != nil {
				checks = append(checks, check("3e", fmt.Sprintf("commit by create: %d clients on one shard: blob PUTs per acked append, background included", sz.OneShardConc),
					*many.WritesPerAppend, "<=", 0.15, putsDetail(many.BlobOps, many.Appends, "each block's background work waited for")))
			} else {
				checks = append(checks, skipped("3e", "commit by create: blob PUTs per acked append", "<=", 0.15, "the target's /metrics could not be read"))
			}
		}
	}

	// --- Target 4: 1,000 shards, 128 resident writers, 32 clients. ---
	if b.want("4") {
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		store = b.store
		say("target 4: %d shards, max-writers %d, %d clients, %v", sz.WideShards, sz.WideMaxWriters, sz.WideClients, sz.WideDuration)
		res, err := b.resident(store, sz.WideMaxWriters, b.target)
		if err != nil {
			return nil, nil, err
		}
		{
			s := b.spec(fmt.Sprintf("T4 resident %d shards", sz.WideShards), modeResident, res.path, sz.WideClients, shardNames(base+"/t4", sz.WideShards))
			s.NewClient, s.Figures, s.RSS, s.Sockets = grpcClients(res.conn), res.figures, res.rss, true
			if inproc {
				s.HTTP = b.http
			}
			p, err := b.newPhase(s)
			if err != nil {
				return nil, nil, err
			}
			p.run(ctx, 0, sz.WideDuration)
			p.close()
			r := add(p)[0]
			checks = append(checks, check("4a", fmt.Sprintf("%d shards, max-writers %d: errors", sz.WideShards, sz.WideMaxWriters), float64(r.ErrorsTotal), "==", 0, errCol(r)))
			if b.cfg.Target != "" {
				checks[len(checks)-1].Detail += "; the remote target must run with --max-writers=128"
			}
			if r.Evictions > 0 || res.figures != nil {
				checks = append(checks, check("4b", fmt.Sprintf("%d shards: writer evictions reported", sz.WideShards), r.Evictions, ">", 0, fmt.Sprintf("%.0f evictions, %.0f writer opens", r.Evictions, r.WriterOpens)))
			} else {
				checks = append(checks, skipped("4b", "writer evictions reported", ">", 0, "the target's /metrics could not be read"))
			}
			checks = append(checks, fencesCheck(r, sz.WideShards))
			if r.RSSQuarterBytes > 0 {
				checks = append(checks, check("4c", fmt.Sprintf("%d shards: RSS at end / RSS at a quarter of the run", sz.WideShards), r.RSSBytes/r.RSSQuarterBytes, "<=", 1.25,
					fmt.Sprintf("%s vs %s (%s)", mib(r.RSSBytes), mib(r.RSSQuarterBytes), r.RSSSource)))
			} else {
				checks = append(checks, skipped("4c", "RSS at end / RSS at a quarter", "<=", 1.25, "RSS unknown"))
			}
		}
		res.stop()
	}

	// --- Target 5: a strong Get from another instance. ---
	if b.want("5") {
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		store = b.store
		say("target 5: Get (strong) from another instance vs the read floor (manifest GET + ranged GET)")
		t5, err := b.target5(ctx)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, t5...)
		if len(t5) == 2 {
			detail := fmt.Sprintf("%s vs %s", ms(getP50(t5[1])), ms(getP50(t5[0])))
			checks = append(checks, check("5", "Get from another instance: p50 / read floor p50", getP50(t5[1])/getP50(t5[0]), "<=", 1.3, detail),
				check("5b", "commit by create: Get from another instance: p50 / two-read floor p50 (5's figure)", getP50(t5[1])/getP50(t5[0]), "<=", 1.6, detail))
		} else {
			checks = append(checks, skipped("5", "Get from another instance: p50 / read floor p50", "<=", 1.3, "the read floor needs --store"),
				skipped("5b", "commit by create: Get from another instance: p50 / two-read floor p50", "<=", 1.6, "the read floor needs --store"))
		}
		say("target 5, scale: Get from another instance on a shard of %d records vs one of %d", sz.GetBigRecords, sz.GetSmallRecords)
		rs, err := b.target5Scale(ctx)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, rs...)
		big, small := rs[len(rs)-2], rs[len(rs)-1]
		checks = append(checks, check("5c", fmt.Sprintf("commit by create: Get from another instance: p50 at %d records / p50 at %d records", sz.GetBigRecords, sz.GetSmallRecords),
			getP50(big)/getP50(small), "<=", 1.25, fmt.Sprintf("%s vs %s", ms(getP50(big)), ms(getP50(small)))))
	}

	// --- Target 6: the embedded local store, across shards and alone. ---
	if b.want("6") {
		if b.cfg.store.Kind != "local" || !inproc {
			checks = append(checks,
				skipped("6a", "local store: 64 clients over 100 shards: appends/s / 64 clients on one shard's", ">=", 0.5, "needs --inprocess on the embedded local store"),
				skipped("6b", "local store, single client: resident p50 over gRPC / local floor p50", "<=", 1.4, "needs --inprocess on the embedded local store"),
				skipped("6c", "local store, single client: resident p50 over gRPC / local one-write floor p50", "<=", 1.4, "needs --inprocess on the embedded local store"))
		} else {
			say("target 6: the local store: %d clients on 1 shard vs over %d shards; a single client vs the local floor (file writes, fsyncs, renames in a loop)", sz.LocalClients, sz.LocalShards)
			rs, cs, err := b.target6(ctx)
			if err != nil {
				return nil, nil, err
			}
			results = append(results, rs...)
			checks = append(checks, cs...)
		}
	}

	// --- Per-append, last. ---
	if store == nil {
		if b.want("1") {
			checks = append(checks, skipped("1c", "single client: per-append p50 / resident p50", ">=", 2.0, "per-append needs --store"))
		}
		if t2 != nil {
			checks = append(checks, check("2", fmt.Sprintf("%d clients: resident's client TIME_WAIT toward the blob endpoint", sz.ManyClients), tw(*t2), "<=", 50, "per-append not measured (needs --store)"))
		}
		return results, sortChecks(checks), nil
	}
	if b.want("1") {
		say("target 1, per-append: the replaced design, single client, interleaved with resident")
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		pa1, err := b.perAppendSingle(ctx)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, pa1...)
		resident1, fresh1, grow1 := pa1[0], pa1[1], pa1[2]
		checks = append(checks, check("1c", "single client: per-append p50 / resident p50 over "+b.storeDesc+" (per-append on a new shard each time: its lower bound)",
			p50(fresh1)/p50(resident1), ">=", 2.0,
			fmt.Sprintf("%s vs %s; on one growing shard: %s (%.1fx)", ms(p50(fresh1)), ms(p50(resident1)), ms(p50(grow1)), p50(grow1)/p50(resident1))))
	}
	if t2 != nil {
		say("target 2, per-append: %d clients, %d appends over %d shards (bounded to %v)", sz.ManyClients, sz.ManyAppends, sz.ManyClients, sz.PerAppendCap)
		if err := b.fresh(ctx); err != nil {
			return nil, nil, err
		}
		pa2, err := b.perAppendMany(ctx)
		if err != nil {
			return nil, nil, err
		}
		results = append(results, pa2)
		detail := fmt.Sprintf("resident: %d TIME_WAIT after %d appends; per-append: %d after %d appends", int(tw(*t2)), t2.Appends, int(tw(pa2)), pa2.Appends)
		if t2.Sockets == nil {
			detail = "no TCP blob endpoint (store: " + b.storeDesc + ")"
		}
		checks = append(checks, check("2", fmt.Sprintf("%d clients, %d shards, %d appends: resident's client TIME_WAIT sockets toward the blob endpoint", sz.ManyClients, sz.ManyClients, sz.ManyAppends), tw(*t2), "<=", 50, detail))
	}
	return results, sortChecks(checks), nil
}

// want reports whether --targets selects target id.
func (b *bench) want(id string) bool {
	return len(b.cfg.Targets) == 0 || slices.Contains(b.cfg.Targets, id)
}

func byName(rs []phaseResult, name string) (phaseResult, bool) {
	for _, r := range rs {
		if r.Name == name {
			return r, true
		}
	}
	return phaseResult{}, false
}

// target1 measures a single client appending one 1 KiB record at a time:
// the floor, a resident shard.Writer called in-process, and the resident
// path over gRPC, interleaved. Writers use wopts (the zero value:
// rolloutd's defaults). Phases are named prefix+" floor", " resident
// in-process", " resident gRPC".
func (b *bench) target1(ctx context.Context, prefix string, wopts shard.Options, pathNote string) ([]phaseResult, error) {
	sz, store, inproc := b.cfg.sizes, b.store, b.cfg.InProcess
	base := b.base() + "/" + sanitize(prefix)
	res, err := b.residentWith(store, b.cfg.MaxWriters, b.target, wopts)
	if err != nil {
		return nil, err
	}
	defer res.stop()
	var t1 []*phase
	defer func() {
		for _, p := range t1 {
			p.close()
		}
	}()
	refShard := base + "-grpc"
	if inproc {
		c := newOpCounter()
		pool := newWriterPool(c.wrap(store), b.log, wopts)
		defer pool.close(ctx)
		refShard = base + "-shard"
		s := b.spec(prefix+" resident in-process", modeResidentShard, pathNote+"resident shard.Writer called directly in-process (no gRPC), on "+b.storeDesc, 1, []string{refShard})
		s.NewClient, s.Figures, s.HTTP = shardClients(pool), c.figures, b.http
		p, err := b.newPhase(s)
		if err != nil {
			return nil, err
		}
		t1 = append(t1, p)
	}
	s := b.spec(prefix+" resident gRPC", modeResident, pathNote+res.path, 1, []string{base + "-grpc"})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	if inproc {
		s.HTTP = b.http
	}
	grpcP, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	t1 = append(t1, grpcP)
	warm(ctx, 20, t1...)
	if store != nil {
		// The floor's manifest is the product shard's real one, as it is
		// after the warm-up; its generation is one append's.
		fs, err := b.floorFor(ctx, base+"/floor", refShard)
		if err != nil {
			return nil, err
		}
		c := newOpCounter()
		fs.store = c.wrap(store)
		s := b.spec(prefix+" floor", modeFloor, "raw blob ops: create-only PUT of the generation + If-Match PUT of the manifest, sequential, shared client, on "+b.storeDesc, 1, []string{refShard})
		s.NewClient, s.Figures, s.HTTP = floorClients(fs), c.figures, b.http
		p, err := b.newPhase(s)
		if err != nil {
			return nil, err
		}
		// The one-write floor of a commit by create: the same generation,
		// its create-only PUT alone.
		c1 := newOpCounter()
		fs1 := &floorSpec{store: c1.wrap(store), prefix: base + "/floor1", generation: fs.generation}
		s = b.spec(prefix+" floor1", modeFloor1, "raw blob op: one create-only PUT of the generation (no manifest write), shared client, on "+b.storeDesc, 1, []string{refShard})
		s.NewClient, s.Figures, s.HTTP = floor1Clients(fs1), c1.figures, b.http
		p1, err := b.newPhase(s)
		if err != nil {
			p.close()
			return nil, err
		}
		warm(ctx, 20, p, p1)
		t1 = append([]*phase{p, p1}, t1...)
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
	var rs []phaseResult
	for _, p := range t1 {
		rs = append(rs, p.result())
	}
	return rs, nil
}

// target6 measures the embedded local store, in-process over gRPC: a
// single client against the local floor (the same file writes, fsyncs and
// renames in a plain loop, beside the store), interleaved; then
// LocalClients clients on one shard against the same clients over
// LocalShards shards, interleaved, with this process's CPU per append in
// both.
func (b *bench) target6(ctx context.Context) ([]phaseResult, []targetCheck, error) {
	sz := b.cfg.sizes
	base := b.base() + "/t6"
	res, err := b.resident(b.store, b.cfg.MaxWriters, nil)
	if err != nil {
		return nil, nil, err
	}
	defer res.stop()
	var ps []*phase
	defer func() {
		for _, p := range ps {
			p.close()
		}
	}()
	newPhase := func(s loadSpec) (*phase, error) {
		p, err := b.newPhase(s)
		if err == nil {
			ps = append(ps, p)
		}
		return p, err
	}

	s := b.spec("T6 resident gRPC 1 client", modeResident, res.path, 1, []string{base + "-single"})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	single, err := newPhase(s)
	if err != nil {
		return nil, nil, err
	}
	warm(ctx, 20, single)
	// The floor's manifest is the product shard's, as the warm-up left it.
	fs, err := b.floorFor(ctx, "", base+"-single")
	if err != nil {
		return nil, nil, err
	}
	dir, err := b.fsFloorDir("t6")
	if err != nil {
		return nil, nil, err
	}
	s = b.spec("T6 local floor", modeFloorFS, "plain file operations in a loop, beside the store: write+fsync+rename of the generation, fsync of its directory, the same for the manifest", 1, []string{base + "-single"})
	s.NewClient = fsFloorClients(dir, fs.generation, fs.manifest)
	floor, err := newPhase(s)
	if err != nil {
		return nil, nil, err
	}
	s = b.spec("T6 local floor1", modeFloor1FS, "plain file operations in a loop, beside the store: write+fsync+rename of the generation, fsync of its directory (one write: commit by create)", 1, []string{base + "-single"})
	dir1, err := b.fsFloorDir("t6-1")
	if err != nil {
		return nil, nil, err
	}
	s.NewClient = fsFloor1Clients(dir1, fs.generation)
	floor1, err := newPhase(s)
	if err != nil {
		return nil, nil, err
	}
	warm(ctx, 20, floor, floor1)
	interleave(ctx, int64(sz.LocalSingle), sz.LocalSingle/10, floor, floor1, single)

	s = b.spec(fmt.Sprintf("T6 resident %d clients, 1 shard", sz.LocalClients), modeResident, res.path, sz.LocalClients, []string{base + "-one"})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	one, err := newPhase(s)
	if err != nil {
		return nil, nil, err
	}
	s = b.spec(fmt.Sprintf("T6 resident %d clients, %d shards", sz.LocalClients, sz.LocalShards), modeResident, res.path, sz.LocalClients, shardNames(base+"-wide", sz.LocalShards))
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	wide, err := newPhase(s)
	if err != nil {
		return nil, nil, err
	}
	// Every writer open before measuring.
	warm(ctx, int64(4*max(sz.LocalShards, sz.LocalClients)), one, wide)
	interleave(ctx, int64(sz.LocalClients*sz.LocalEach), 4, one, wide)

	rs := []phaseResult{floor.result(), floor1.result(), single.result(), one.result(), wide.result()}
	fr, f1r, sr, or, wr := rs[0], rs[1], rs[2], rs[3], rs[4]
	cpu := func(r phaseResult) string {
		if r.CPUusPerAppend == nil {
			return "?"
		}
		return fmt.Sprintf("%.0f µs", *r.CPUusPerAppend)
	}
	return rs, []targetCheck{
		check("6a", fmt.Sprintf("local store: %d clients over %d shards: appends/s / %d clients on one shard's", sz.LocalClients, sz.LocalShards, sz.LocalClients),
			wr.AppendsPerSec/or.AppendsPerSec, ">=", 0.5,
			fmt.Sprintf("%.0f/s vs %.0f/s; CPU per append %s vs %s", wr.AppendsPerSec, or.AppendsPerSec, cpu(wr), cpu(or))),
		check("6b", "local store, single client: resident p50 over gRPC / local floor p50", p50(sr)/p50(fr), "<=", 1.4,
			fmt.Sprintf("%s vs %s", ms(p50(sr)), ms(p50(fr)))),
		check("6c", "commit by create: local store, single client: resident p50 over gRPC / local one-write floor p50", p50(sr)/p50(f1r), "<=", 1.4,
			fmt.Sprintf("%s vs %s", ms(p50(sr)), ms(p50(f1r)))),
	}, nil
}

// tw is a phase's peak client TIME_WAIT count toward the blob endpoint, or
// NaN without one.
func tw(r phaseResult) float64 {
	if r.Sockets == nil {
		return math.NaN()
	}
	return float64(r.Sockets.Peak.TimeWait)
}

func sortChecks(cs []targetCheck) []targetCheck {
	order := []string{"1a", "1b", "1c", "1d", "1e", "1f", "1g", "2", "3a", "3b", "3c", "3d", "3e", "4a", "4b", "4c", "4d", "5", "5b", "5c", "6a", "6b", "6c"}
	var out []targetCheck
	for _, id := range order {
		for _, c := range cs {
			if c.ID == id {
				out = append(out, c)
			}
		}
	}
	return out
}

// floorFor prepares floor blobs under prefix: a generation of one append
// and the manifest of refShard as it is now (or a fresh one).
func (b *bench) floorFor(ctx context.Context, prefix, refShard string) (*floorSpec, error) {
	gen, err := generationBlob(b.base()+"/floor", []*rolloutv1.Record{b.newRecord(0)})
	if err != nil {
		return nil, err
	}
	fs := &floorSpec{prefix: prefix, generation: gen}
	if refShard != "" {
		if m, _, err := b.store.Get(ctx, format.ManifestName(refShard), blob.GetOptions{}); err == nil {
			fs.manifest = m
		}
	}
	if fs.manifest == nil {
		if fs.manifest, err = freshManifest(); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// target5 appends records through one instance, then measures Gets through
// another (its own server and caches and, on Azure, its own client) against
// the read floor on that instance's client. It returns the floor's and the
// Get's results.
func (b *bench) target5(ctx context.Context) ([]phaseResult, error) {
	sz := b.cfg.sizes
	sh := b.base() + "/t5"
	writer, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return nil, err
	}
	defer writer.stop()
	s := b.spec("T5 populate", modeResident, writer.path, 8, []string{sh})
	s.NewClient, s.KeepIDs = grpcClients(writer.conn), true
	fill, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	fill.run(ctx, int64(sz.GetRecords), 0)
	ids := fill.ackedIDs()
	fill.close()
	if len(ids) == 0 {
		return nil, fmt.Errorf("target 5: no record appended (%v)", fill.result().FirstErrors)
	}

	// The other instance.
	readStore := b.store
	note := ""
	if b.cfg.InProcess && b.cfg.store.Kind == "azblob" {
		st, drop, err := b.newStoreForAppend(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = drop() }()
		readStore = st
	} else if b.cfg.InProcess {
		note = "the second instance shares the store handle (a local store opens once per process)"
	}
	reader, err := b.resident(readStore, b.cfg.MaxWriters, b.getTarget)
	if err != nil {
		return nil, err
	}
	defer reader.stop()
	if b.cfg.Target != "" && b.cfg.GetTarget == "" {
		note = "no --get-target: Gets go to the same rolloutd that wrote"
	}
	s = b.spec("T5 Get, other instance", modeResident, reader.path, 1, []string{sh})
	s.NewClient, s.Figures, s.ReadFraction, s.ReadIDs = grpcClients(reader.conn), reader.figures, 1, ids
	getP, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	defer getP.close()
	if note != "" {
		getP.note(note)
	}
	if b.store == nil {
		warm(ctx, 20, getP)
		getP.run(ctx, int64(sz.Gets), 0)
		return []phaseResult{getP.result()}, nil
	}
	raw, _, err := readStore.Get(ctx, format.ManifestName(sh), blob.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("target 5: read manifest: %w", err)
	}
	m, err := format.DecodeManifest(raw)
	if err != nil {
		return nil, err
	}
	fs := &floorSpec{prefix: b.base() + "/floor/t5", readShard: sh, readBytes: int64(len(b.content))}
	if fs.readGens, err = readableBlobs(ctx, readStore, sh, m); err != nil {
		return nil, err
	}
	if fs.generation, err = generationBlob(sh, []*rolloutv1.Record{b.newRecord(0)}); err != nil {
		return nil, err
	}
	if fs.manifest, err = freshManifest(); err != nil {
		return nil, err
	}
	c := newOpCounter()
	fs.store = c.wrap(readStore)
	s = b.spec("T5 read floor", modeFloor, "raw blob ops: GET of the shard's manifest + one ranged GET of a record's bytes, sequential, on the reading instance's client", 1, []string{sh})
	s.NewClient, s.Figures, s.ReadFraction, s.ReadIDs = floorClients(fs), c.figures, 1, ids
	floorP, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	defer floorP.close()
	warm(ctx, 20, floorP, getP)
	interleave(ctx, int64(sz.Gets), sz.Gets/10, floorP, getP)
	return []phaseResult{floorP.result(), getP.result()}, nil
}

// perAppendSingle measures the replaced design with one client, interleaved
// with the resident writer it is compared with: per-append on a new shard
// each time (the least it can cost) and on one shard that keeps growing.
// It returns resident, per-append fresh, per-append growing.
func (b *bench) perAppendSingle(ctx context.Context) ([]phaseResult, error) {
	sz := b.cfg.sizes
	base := b.base()
	var resP *phase
	var res *resident
	if b.cfg.InProcess {
		c := newOpCounter()
		pool := newWriterPool(c.wrap(b.store), b.log, shard.Options{})
		defer pool.close(ctx)
		s := b.spec("T1 resident in-process (vs per-append)", modeResidentShard, "resident shard.Writer called directly in-process, on "+b.storeDesc, 1, []string{base + "/t1pa-resident"})
		s.NewClient, s.Figures, s.HTTP = shardClients(pool), c.figures, b.http
		var err error
		if resP, err = b.newPhase(s); err != nil {
			return nil, err
		}
	} else {
		var err error
		if res, err = b.resident(b.store, b.cfg.MaxWriters, b.target); err != nil {
			return nil, err
		}
		defer res.stop()
		s := b.spec("T1 resident gRPC (vs per-append)", modeResident, res.path, 1, []string{base + "/t1pa-resident"})
		s.NewClient, s.Figures = grpcClients(res.conn), res.figures
		if resP, err = b.newPhase(s); err != nil {
			return nil, err
		}
	}
	defer resP.close()
	counter := newOpCounter()
	pa := &perAppendSpec{newStore: b.newStoreForAppend, counter: counter, log: b.log}
	paths := "per append: " + b.perAppendPath()
	fresh := *pa
	fresh.freshShard = func(client, n int) string { return fmt.Sprintf("%s/pa1-%d-%d", base, client, n) }
	s := b.spec("T1 per-append, new shard each", modePerAppend, paths+"; each append to a shard never written before", 1, []string{base + "/unused"})
	s.NewClient, s.Figures, s.HTTP = perAppendClients(&fresh), counter.figures, b.http
	freshP, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	defer freshP.close()
	grow := *pa
	s = b.spec("T1 per-append, one shard", modePerAppend, paths+"; every append to the same shard, whose live generations grow (no resident merger)", 1, []string{base + "/t1pa-grow"})
	s.NewClient, s.Figures, s.HTTP = perAppendClients(&grow), counter.figures, b.http
	growP, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	defer growP.close()
	warm(ctx, 10, resP, freshP)
	interleave(ctx, int64(sz.PerAppendOps), sz.PerAppendOps/5, resP, freshP, growP)
	return []phaseResult{resP.result(), freshP.result(), growP.result()}, nil
}

func (b *bench) perAppendPath() string {
	if b.cfg.store.Kind == "azblob" {
		return "azure.New (a new http.Transport and client; its container check included) → shard.Open (claims an epoch) → Append → Close → Store.Close (drops the transport), on " + b.storeDesc
	}
	return "shard.Open (claims an epoch) → Append → Close on the shared " + b.storeDesc + " (no transport to rebuild: a local store opens once per process)"
}

// perAppendMany is target 2's load in the replaced design.
func (b *bench) perAppendMany(ctx context.Context) (phaseResult, error) {
	sz := b.cfg.sizes
	counter := newOpCounter()
	pa := &perAppendSpec{newStore: b.newStoreForAppend, counter: counter, log: b.log}
	s := b.spec(fmt.Sprintf("T2 per-append %d clients", sz.ManyClients), modePerAppend, "per append: "+b.perAppendPath(), sz.ManyClients, shardNames(b.base()+"/t2pa", sz.ManyClients))
	s.NewClient, s.Figures, s.HTTP, s.Sockets, s.Settle = perAppendClients(pa), counter.figures, b.http, true, sz.Settle
	p, err := b.newPhase(s)
	if err != nil {
		return phaseResult{}, err
	}
	defer p.close()
	p.run(ctx, sz.ManyAppends, sz.PerAppendCap)
	return p.result(), nil
}

// printChecks writes the targets' table.
func printChecks(w io.Writer, cs []targetCheck) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\twhat\tmeasured\twant\tverdict\tdetail")
	for _, c := range cs {
		v, verdict := "-", "not measured"
		if c.Value != nil {
			v = fmt.Sprintf("%.3g", *c.Value)
		}
		if c.Met != nil {
			verdict = map[bool]string{true: "met", false: "MISSED"}[*c.Met]
		}
		want := fmt.Sprintf("%s %g", c.Op, c.Want)
		if c.Op == "report" {
			want, verdict = "-", map[bool]string{true: "reported", false: "n/a"}[c.Value != nil]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.What, v, want, verdict, c.Detail)
	}
	tw.Flush()
}

// commitByCreate1 is target 1's rows for issue 21 (commit by create),
// from the phases target1 returned.
func commitByCreate1(rs []phaseResult, inproc bool) []targetCheck {
	var out []targetCheck
	floor, haveFloor := byName(rs, "T1 floor")
	floor1, haveFloor1 := byName(rs, "T1 floor1")
	grpc1, _ := byName(rs, "T1 resident gRPC")
	shard1, haveShard := byName(rs, "T1 resident in-process")
	switch {
	case haveShard && haveFloor1:
		out = append(out, check("1d", "commit by create: single client: resident p50 / floor1 p50, in-process (shard.Writer)",
			p50(shard1)/p50(floor1), "<=", 1.25, fmt.Sprintf("%s vs %s", ms(p50(shard1)), ms(p50(floor1)))))
	case !inproc:
		out = append(out, skipped("1d", "commit by create: single client: resident p50 / floor1 p50, in-process", "<=", 1.25, "needs --inprocess"))
	default:
		out = append(out, skipped("1d", "commit by create: single client: resident p50 / floor1 p50, in-process", "<=", 1.25, "the floor needs --store"))
	}
	if haveFloor && haveFloor1 {
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

// putsDetail describes a phase's blob writes: PUTs by kind and DELETEs.
func putsDetail(ops map[string]float64, appends int64, how string) string {
	d := fmt.Sprintf("%.0f PUTs (%.0f create-only, %.0f CAS, %.0f plain) and %.0f DELETEs for %d appends",
		ops["put"]+ops["put_create"]+ops["put_cas"], ops["put_create"], ops["put_cas"], ops["put"], ops["delete"], appends)
	if appends > 0 {
		d += fmt.Sprintf(" (%.3f DELETEs per append)", ops["delete"]/float64(appends))
	}
	if how != "" {
		d += "; " + how
	}
	return d
}

// fencesCheck reports the fences target 4 wrote to commit logs, from the
// server's rolloutd_log_fences_total; n/a where the server has no such
// counter (a protocol-v1 build).
func fencesCheck(r phaseResult, shards int) targetCheck {
	what := fmt.Sprintf("commit by create: %d shards: fences written to commit logs", shards)
	if r.LogFences == nil {
		return reported("4d", what, math.NaN(), "n/a: the server exports no rolloutd_log_fences_total (protocol v1 writes no fences)")
	}
	return reported("4d", what, *r.LogFences, fmt.Sprintf("%.0f fences, %.0f writer opens, %.0f evictions", *r.LogFences, r.WriterOpens, r.Evictions))
}

// target5Scale appends GetBigRecords small records to one shard and
// GetSmallRecords to another through one instance, then measures Gets of
// each through another instance (its own server and caches and, on Azure,
// its own client), interleaved. It returns the fills' and the Gets'
// results, the Gets last: big, then small.
func (b *bench) target5Scale(ctx context.Context) ([]phaseResult, error) {
	sz := b.cfg.sizes
	sz.GetFillBatch = max(1, sz.GetFillBatch)
	base := b.base() + "/t5s"
	writer, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return nil, err
	}
	defer writer.stop()
	// Small records, many to an append: the fill is about the shard's
	// shape (records, generations, merges), not about its bytes, which
	// in-memory Azurite would have to hold several times over as merges
	// rewrite them.
	small := smallRecords(grpcClients(writer.conn), sz.GetFillBytes)
	var out []phaseResult
	fill := func(name, sh string, records int) ([]idRef, error) {
		s := b.spec(name, modeResident, writer.path, min(32, max(1, records/sz.GetFillBatch)), []string{sh})
		s.NewClient, s.Figures, s.KeepIDs, s.Records, s.RecordBytes = small, writer.figures, true, sz.GetFillBatch, sz.GetFillBytes
		p, err := b.newPhase(s)
		if err != nil {
			return nil, err
		}
		defer p.close()
		p.run(ctx, int64((records+sz.GetFillBatch-1)/sz.GetFillBatch), 0)
		r := p.result()
		out = append(out, r)
		if r.ErrorsTotal > 0 || len(p.ackedIDs()) == 0 {
			return nil, fmt.Errorf("%s: %d errors (%v)", name, r.ErrorsTotal, r.FirstErrors)
		}
		return p.ackedIDs(), nil
	}
	bigShard, smallShard := base+"-big", base+"-small"
	bigIDs, err := fill(fmt.Sprintf("T5 fill %d records", sz.GetBigRecords), bigShard, sz.GetBigRecords)
	if err != nil {
		return nil, err
	}
	smallIDs, err := fill(fmt.Sprintf("T5 fill %d records", sz.GetSmallRecords), smallShard, sz.GetSmallRecords)
	if err != nil {
		return nil, err
	}

	readStore := b.store
	if b.cfg.InProcess && b.cfg.store.Kind == "azblob" {
		st, drop, err := b.newStoreForAppend(ctx)
		if err != nil {
			return nil, err
		}
		defer func() { _ = drop() }()
		readStore = st
	}
	reader, err := b.resident(readStore, b.cfg.MaxWriters, b.getTarget)
	if err != nil {
		return nil, err
	}
	defer reader.stop()
	var gets []*phase
	for _, g := range []struct {
		records int
		sh      string
		ids     []idRef
	}{{sz.GetBigRecords, bigShard, bigIDs}, {sz.GetSmallRecords, smallShard, smallIDs}} {
		s := b.spec(fmt.Sprintf("T5 Get at %d records", g.records), modeResident, reader.path, 1, []string{g.sh})
		s.NewClient, s.Figures, s.ReadFraction, s.ReadIDs = grpcClients(reader.conn), reader.figures, 1, g.ids
		p, err := b.newPhase(s)
		if err != nil {
			return nil, err
		}
		defer p.close()
		gets = append(gets, p)
	}
	warm(ctx, 20, gets...)
	interleave(ctx, int64(sz.Gets), sz.Gets/10, gets...)
	return append(out, gets[0].result(), gets[1].result()), nil
}

// smallRecords sends records with n bytes of content instead of the run's.
func smallRecords(next func(int) (clientOps, error), n int) func(int) (clientOps, error) {
	content := strings.Repeat("s", n)
	return func(i int) (clientOps, error) {
		ops, err := next(i)
		if err != nil {
			return ops, err
		}
		inner := ops.append
		ops.append = func(ctx context.Context, sh string, recs []*rolloutv1.Record) error {
			for _, r := range recs {
				r.Content = content
			}
			return inner(ctx, sh, recs)
		}
		return ops, nil
	}
}

// readableBlobs names the blobs that hold the shard's records: the
// generations its manifest lists (a log batch, under protocol v2, by its
// position) and, under v2, the log positions past the checkpoint, which hold
// the records no checkpoint lists yet.
func readableBlobs(ctx context.Context, st blob.Store, sh string, m *storagepb.Manifest) ([]string, error) {
	var names []string
	for _, g := range m.GetGenerations() {
		names = append(names, format.BlobOf(sh, g))
	}
	for token := ""; ; {
		page, err := st.List(ctx, blob.ListOptions{Prefix: format.LogPrefix(sh), Token: token})
		if err != nil {
			return nil, fmt.Errorf("target 5: list the log: %w", err)
		}
		for _, it := range page.Items {
			if p, ok := format.ParseLogName(sh, it.Name); ok && p > m.GetLogCheckpoint() {
				names = append(names, it.Name)
			}
		}
		if token = page.Next; token == "" {
			return names, nil
		}
	}
}
