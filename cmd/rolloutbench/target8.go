package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// Target 8 (issue 33): Subscribe over a prefix, on an Azurite of its own,
// on disk (a backlog of 200k 1 KiB records does not fit its in-memory
// extents).
//
//   - 8a1, 8a2: ack-to-delivery latency of an active shard, its writer on
//     the subscriber's instance and on another: two rolloutd processes (so
//     that nothing in one process can tell the other of a commit), the
//     median of the rounds' p50s.
//   - 8b: idle cost: one subscription over T8Shards shards, all but T8Busy
//     idle, in an in-process rolloutd whose store counts operations per
//     shard (shardOps): the operations on idle shards (and the listings
//     that find shards) in a window with the subscription, less those in
//     an equal window without it, per idle shard per second.
//   - 8c: fan-out: T8FanSubs subscribers against one, over the same busy
//     shards under the same append rate: the store reads they cause (reads
//     in the window less those of a window with no subscriber, per append).
//   - 8d: throughput: one subscription drains a backlog against a plain
//     Scan of each shard in turn, alternating, the median of the rounds.

func runTarget8(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if why := t8Refused(b.cfg); why != "" {
		var rows []targetCheck
		for _, d := range t8RowDefs() {
			rows = append(rows, skipped(d.id, d.what, d.op, d.want, why))
		}
		return &outcome{rows: rows}, nil
	}
	b.progress.say("target 8: Subscribe on an Azurite of its own (on disk): latency, idle cost over %d shards, fan-out of %d, a %d-record backlog",
		sz.T8Shards, sz.T8FanSubs, sz.T8Backlog)
	inst, err := azurite.StartMain(azurite.Options{OnDisk: true})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, inst.Stop()) }()
	env := &t8Env{b: b, conn: inst.ConnectionString}
	var rows []targetCheck
	for _, part := range t8Parts {
		if !slices.Contains(strings.Split(b.cfg.T8Parts, ","), part.name) {
			for _, id := range part.rows {
				d := t8Def(id)
				rows = append(rows, skipped(d.id, d.what, d.op, d.want, "--t8-parts leaves out "+part.name))
			}
			continue
		}
		got, err := part.run(env, ctx)
		if err != nil {
			return nil, fmt.Errorf("target 8 %s: %w", part.name, err)
		}
		rows = append(rows, got...)
	}
	return &outcome{rows: rows}, nil
}

// t8Parts are target 8's parts, which --t8-parts selects, and their rows.
var t8Parts = []struct {
	name string
	rows []string
	run  func(e *t8Env, ctx context.Context) ([]targetCheck, error)
}{
	{"latency", []string{"8a1", "8a2"}, (*t8Env).latency},
	{"idle", []string{"8b"}, one((*t8Env).idleCost)},
	{"fanout", []string{"8c"}, one((*t8Env).fanOut)},
	{"throughput", []string{"8d"}, one((*t8Env).throughput)},
}

func one(f func(*t8Env, context.Context) (targetCheck, error)) func(*t8Env, context.Context) ([]targetCheck, error) {
	return func(e *t8Env, ctx context.Context) ([]targetCheck, error) {
		c, err := f(e, ctx)
		return []targetCheck{c}, err
	}
}

type t8RowDef struct {
	id, what, op string
	want         float64
}

func t8RowDefs() []t8RowDef {
	return []t8RowDef{
		{"8a1", "Subscribe ack→delivery p50, writer on the subscriber's instance (ms)", "<=", 100},
		{"8a2", "Subscribe ack→delivery p50, writer on another instance (ms)", "<=", 2000},
		{"8b", "Subscribe idle cost: store ops per idle shard per second", "<=", 0.05},
		{"8c", "Subscribe fan-out: store reads of 50 subscribers ÷ 1's", "<=", 1.5},
		{"8d", "Subscribe drain records/s ÷ plain Scan's, same backlog", ">=", 0.5},
	}
}

func t8Def(id string) t8RowDef {
	for _, d := range t8RowDefs() {
		if d.id == id {
			return d
		}
	}
	panic("no target 8 row " + id)
}

func t8Row(id string, v float64, detail string) targetCheck {
	d := t8Def(id)
	return check(d.id, d.what, v, d.op, d.want, detail)
}

// t8Refused says why target 8 does not run, or "": it starts an Azurite
// and rolloutd processes of its own, minutes of work, so it runs only when
// --targets names it, and never against a --target.
func t8Refused(c *config) string {
	switch {
	case c.Target != "":
		return "measures rolloutds it starts itself, never a --target: run it without --target"
	case !slices.Contains(c.Targets, "8"):
		return "runs only when named: --targets 8 (it starts an Azurite and rolloutd processes of its own)"
	}
	return ""
}

// t8Env is what target 8's parts share: its Azurite.
type t8Env struct {
	b    *bench
	conn string // the Azurite's connection string
}

func (e *t8Env) container(part string) string { return "t8" + part + "-" + e.b.runID }

// note adds a diagnostics line under the targets' table.
func (e *t8Env) note(format string, args ...any) {
	e.b.diagnostics = append(e.b.diagnostics, "8: "+fmt.Sprintf(format, args...))
}

// t8Inproc is an in-process rolloutd on a container of the Azurite, its
// store operations counted per shard class.
type t8Inproc struct {
	srv   *inprocServer
	ops   *shardOps
	store *azure.Store
}

func (e *t8Env) inproc(ctx context.Context, part string, classify func(string) string, tweak func(*server.Config)) (*t8Inproc, error) {
	st, err := azure.New(ctx, azure.Config{Container: e.container(part), ConnectionString: e.conn,
		MaxConns: azure.DefaultMaxConns, Logger: e.b.log.Named("azure")})
	if err != nil {
		return nil, err
	}
	ops := newShardOps(st, classify)
	srv, err := e.b.startServerWith(ops, server.DefaultMaxWriters, shard.Options{}, tweak)
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	return &t8Inproc{srv: srv, ops: ops, store: st}, nil
}

func (p *t8Inproc) close() error {
	p.srv.stop()
	return p.store.Close()
}

// payload is 1 KiB of content.
var payload = strings.Repeat("x", 1024)

func (e *t8Env) records(n int) []*rolloutv1.Record {
	recs := make([]*rolloutv1.Record, n)
	for i := range recs {
		recs[i] = e.b.newRecord(0)
		recs[i].Content = payload
	}
	return recs
}

// watcher consumes a subscription in the background and notes when each
// record id arrived.
type watcher struct {
	cancel context.CancelFunc
	done   chan error

	mu      sync.Mutex
	arrived map[string]time.Time
	n       atomic.Int64
}

// watch subscribes c to prefix from the first record of each shard.
// keep says whether to note each record's arrival (else only count).
func watch(ctx context.Context, c *client.Client, prefix string, keep bool) (*watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	sub, err := c.Subscribe(ctx, prefix, client.SubscribeOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	w := &watcher{cancel: cancel, done: make(chan error, 1), arrived: map[string]time.Time{}}
	go func() {
		defer sub.Close()
		for batch, err := range sub.Batches() {
			if err != nil {
				if ctx.Err() != nil {
					err = nil
				}
				w.done <- err
				return
			}
			now := time.Now()
			if keep {
				w.mu.Lock()
				for _, r := range batch.Records {
					w.arrived[r.GetId()] = now
				}
				w.mu.Unlock()
			}
			w.n.Add(int64(len(batch.Records)))
		}
		w.done <- nil
	}()
	return w, nil
}

func (w *watcher) at(id string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.arrived[id]
	return t, ok
}

// waitCount waits until n records arrived, or d passed.
func (w *watcher) waitCount(ctx context.Context, n int64, d time.Duration) bool {
	end := time.Now().Add(d)
	for w.n.Load() < n {
		if time.Now().After(end) || ctx.Err() != nil {
			return false
		}
		pause(ctx, 5*time.Millisecond)
	}
	return true
}

func (w *watcher) stop() error {
	w.cancel()
	return <-w.done
}

// latency: two rolloutd processes on one container; a subscriber on A
// over a prefix holding a shard written through A and one written
// through B, appended to in turn every 50 ms.
func (e *t8Env) latency(ctx context.Context) (_ []targetCheck, err error) {
	sz := e.b.cfg.sizes
	bins, err := e.b.t7Binaries()
	if err != nil {
		return nil, err
	}
	env := []string{envConnectionString + "=" + e.conn}
	store := "azblob://" + e.container("lat")
	a, err := e.b.startT7Server(bins[0], env, "--store", store)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, a.stop()) }()
	bsrv, err := e.b.startT7Server(bins[0], env, "--store", store)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, bsrv.stop()) }()
	var local, remote []float64
	var lost int
	for r := range max(1, sz.T8Rounds) {
		e.b.progress.say("target 8: latency round %d", r+1)
		prefix := fmt.Sprintf("%s/t8lat/r%d", e.b.base(), r)
		l, rm, n, err := e.latencyRound(ctx, a.conn, bsrv.conn, prefix, sz.T8LatAppends)
		if err != nil {
			return nil, err
		}
		lost += n
		local, remote = append(local, l), append(remote, rm)
		e.note("latency round %d: p50 %.1f ms local, %.1f ms remote (%d appends each)", r+1, l, rm, sz.T8LatAppends)
	}
	detail := fmt.Sprintf("median of %d rounds' p50 (%v); two rolloutd processes on one Azurite container (on disk), subscriber on A", len(local), fmtMS(local))
	rdetail := fmt.Sprintf("median of %d rounds' p50 (%v); writer on B, subscriber on A", len(remote), fmtMS(remote))
	if lost > 0 {
		rdetail += fmt.Sprintf("; %d records NOT delivered within 10 s (counted as 10 s)", lost)
	}
	return []targetCheck{t8Row("8a1", median(local), detail), t8Row("8a2", median(remote), rdetail)}, nil
}

func fmtMS(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.1f", x)
	}
	return strings.Join(s, ", ")
}

// latencyRound returns the p50s, in ms, of the local and remote shard's
// ack-to-delivery latency, and how many records never arrived.
func (e *t8Env) latencyRound(ctx context.Context, a, b *client.Client, prefix string, n int) (local, remote float64, lost int, err error) {
	shards := [2]string{prefix + "/local", prefix + "/remote"}
	via := [2]*client.Client{a, b}
	// The shards exist and are active before the subscription starts.
	for i := range shards {
		for range 3 {
			if _, err := via[i].Append(ctx, shards[i], e.records(1)); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	w, err := watch(ctx, a, prefix, true)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = errors.Join(err, w.stop()) }()
	if !w.waitCount(ctx, 6, 30*time.Second) {
		return 0, 0, 0, errors.New("the subscription did not deliver the first records within 30 s")
	}
	acked := [2]map[string]time.Time{{}, {}}
	for range n {
		for i := range shards {
			recs := e.records(1)
			if _, err := via[i].Append(ctx, shards[i], recs); err != nil {
				return 0, 0, 0, err
			}
			acked[i][recs[0].GetId()] = time.Now()
			pause(ctx, 50*time.Millisecond)
		}
	}
	w.waitCount(ctx, int64(6+2*n), 10*time.Second)
	var p50s [2]float64
	for i := range shards {
		var lat []float64
		for id, t := range acked[i] {
			got, ok := w.at(id)
			if !ok {
				lost++
				lat = append(lat, 10_000)
				continue
			}
			lat = append(lat, max(0, float64(got.Sub(t).Microseconds())/1000))
		}
		p50s[i] = median(lat)
	}
	return p50s[0], p50s[1], lost, nil
}

// appendAll appends recs(shard) once per entry of shards, workers at a
// time.
func appendAll(ctx context.Context, c *client.Client, shards []string, workers int, recs func(shard string) []*rolloutv1.Record) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if int(i) >= len(shards) || ctx.Err() != nil {
					return
				}
				if _, err := c.Append(ctx, shards[i], recs(shards[i])); err != nil {
					errs[w] = fmt.Errorf("append %s: %w", shards[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// paced appends one record at a time to shards in turn at rate appends/s
// until stop is closed, and counts them.
type paced struct {
	stop chan struct{}
	done chan error
	n    atomic.Int64
}

func startPaced(ctx context.Context, e *t8Env, c *client.Client, shards []string, rate int) *paced {
	p := &paced{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(max(1, rate)))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				p.done <- nil
				return
			case <-ctx.Done():
				p.done <- ctx.Err()
				return
			case <-tick.C:
			}
			if _, err := c.Append(ctx, shards[i%len(shards)], e.records(1)); err != nil {
				p.done <- err
				return
			}
			p.n.Add(1)
		}
	}()
	return p
}

func (p *paced) end() (int64, error) {
	close(p.stop)
	return p.n.Load(), <-p.done
}

// idleCost: 8b.
func (e *t8Env) idleCost(ctx context.Context) (_ targetCheck, err error) {
	sz := e.b.cfg.sizes
	root := e.b.base() + "/t8idle"
	busy := make([]string, sz.T8Busy)
	for i := range busy {
		busy[i] = fmt.Sprintf("%s/busy-%03d", root, i)
	}
	idle := make([]string, sz.T8Shards-sz.T8Busy)
	for i := range idle {
		idle[i] = fmt.Sprintf("%s/idle-%04d", root, i)
	}
	classify := func(sh string) string {
		switch {
		case strings.HasPrefix(sh, root+"/idle-"):
			return "idle"
		case strings.HasPrefix(sh, root+"/busy-"):
			return "busy"
		}
		return "other"
	}
	idleAfter := sz.T8IdleAfter
	srv, err := e.inproc(ctx, "idle", classify, func(c *server.Config) { c.SubscribeIdleAfter = idleAfter })
	if err != nil {
		return targetCheck{}, err
	}
	defer func() { err = errors.Join(err, srv.close()) }()
	c := srv.srv.conn
	e.b.progress.say("target 8: idle cost: creating %d shards", sz.T8Shards)
	created := time.Now()
	if err := appendAll(ctx, c, append(slices.Clone(busy), idle...), 16, func(string) []*rolloutv1.Record { return e.records(1) }); err != nil {
		return targetCheck{}, err
	}
	e.note("idle cost: %d shards created in %.1f s", sz.T8Shards, time.Since(created).Seconds())
	pause(ctx, 2*time.Second) // the writers' checkpoints after the first appends

	window := func(name string) (map[opKey]float64, int64, error) {
		e.b.progress.say("target 8: idle cost: window %s (%v)", name, sz.T8IdleWindow)
		before := srv.ops.snapshot()
		p := startPaced(ctx, e, c, busy, 2*len(busy))
		pause(ctx, sz.T8IdleWindow)
		n, err := p.end()
		return opsSince(srv.ops.snapshot(), before), n, err
	}
	w, err := watch(ctx, c, root, false)
	if err != nil {
		return targetCheck{}, err
	}
	caughtUp := time.Now()
	if !w.waitCount(ctx, int64(sz.T8Shards), 2*time.Minute) {
		return targetCheck{}, fmt.Errorf("the subscription delivered %d of the %d shards' first records in 2 minutes", w.n.Load(), sz.T8Shards)
	}
	e.note("idle cost: the subscription delivered every shard's first record in %.1f s", time.Since(caughtUp).Seconds())
	// The idle shards' readers park IdleAfter after they last read
	// something: the window starts once every idle shard's reader is
	// parked (the state an idle shard is in), or after IdleAfter and a
	// minute.
	park := idleAfter
	if park <= 0 {
		park = 30 * time.Second
	}
	e.b.progress.say("target 8: idle cost: waiting for the idle readers to park (up to %v)", park+time.Minute)
	parkStart := time.Now()
	for time.Since(parkStart) < park+time.Minute && ctx.Err() == nil &&
		gaugeSum(srv.srv.reg, "rolloutd_subscribe_shard_readers_parked") < float64(len(idle)) {
		pause(ctx, 100*time.Millisecond)
	}
	parkWait := time.Since(parkStart)
	readers, parked := gaugeSum(srv.srv.reg, "rolloutd_subscribe_shard_readers"), gaugeSum(srv.srv.reg, "rolloutd_subscribe_shard_readers_parked")
	with, withAppends, err := window("with the subscription")
	if err = errors.Join(err, w.stop()); err != nil {
		return targetCheck{}, err
	}
	// The baseline comes after: by then the writers' own background work
	// after the shards' creation (checkpoints, listings) is over, as it
	// was in the window with the subscription.
	pause(ctx, time.Second)
	base, baseAppends, err := window("without a subscription")
	if err != nil {
		return targetCheck{}, err
	}
	secs, nIdle := sz.T8IdleWindow.Seconds(), float64(len(idle))
	caused := map[string]float64{}
	var total float64
	for _, class := range []string{"idle", "listing"} {
		for k, v := range with {
			if k.class == class {
				caused[class+" "+k.op] += v
			}
		}
		for k, v := range base {
			if k.class == class {
				caused[class+" "+k.op] -= v
			}
		}
	}
	var kinds []string
	for k, v := range caused {
		total += v
		kinds = append(kinds, fmt.Sprintf("%s %.4f/s", k, v/secs/nIdle))
	}
	sort.Strings(kinds)
	e.note("idle cost: per idle shard per second, by kind (with less without): %s", strings.Join(kinds, ", "))
	e.note("idle cost: at the window's start %.0f shard readers ran, %.0f of them parked", readers, parked)
	e.note("idle cost: all classes with the subscription %s; without %s (busy appends %d and %d)", fmtOps(with), fmtOps(base), withAppends, baseAppends)
	detail := fmt.Sprintf("%d idle + %d busy shards (busy appended %d/s), %v windows with one subscription, then without; ops on idle shards and shard listings, with less without, ÷ %d idle shards ÷ s; the window started %.0f s after the idle shards' last append, %.1f s after the subscription caught up, when %.0f of the %.0f readers were parked (--subscribe-idle-after %v)",
		len(idle), len(busy), 2*len(busy), sz.T8IdleWindow, len(idle), time.Since(created).Seconds()-secs, parkWait.Seconds(), parked, readers, park)
	return t8Row("8b", total/secs/nIdle, detail), nil
}

func fmtOps(m map[opKey]float64) string {
	var s []string
	for k, v := range m {
		s = append(s, fmt.Sprintf("%s/%s %.0f", k.class, k.op, v))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func reads(m map[opKey]float64) float64 {
	var n float64
	for k, v := range m {
		if k.op == "get" || k.op == "head" || k.op == "list" {
			n += v
		}
	}
	return n
}

// fanOut: 8c.
func (e *t8Env) fanOut(ctx context.Context) (_ targetCheck, err error) {
	sz := e.b.cfg.sizes
	root := e.b.base() + "/t8fan"
	shards := make([]string, sz.T8FanShards)
	for i := range shards {
		shards[i] = fmt.Sprintf("%s/s-%03d", root, i)
	}
	srv, err := e.inproc(ctx, "fan", func(string) string { return "shard" }, nil)
	if err != nil {
		return targetCheck{}, err
	}
	defer func() { err = errors.Join(err, srv.close()) }()
	c := srv.srv.conn
	if err := appendAll(ctx, c, shards, 16, func(string) []*rolloutv1.Record { return e.records(1) }); err != nil {
		return targetCheck{}, err
	}
	pause(ctx, time.Second)
	type win struct {
		subs    int
		reads   float64
		appends int64
	}
	var wins []win
	for _, subs := range []int{0, 1, sz.T8FanSubs} {
		e.b.progress.say("target 8: fan-out: %d subscribers", subs)
		// Each window's subscribers start at the shards' ends: what they
		// read in the window is the new commits'.
		var ws []*watcher
		for range subs {
			w, err := watchLatest(ctx, c, root)
			if err != nil {
				return targetCheck{}, err
			}
			ws = append(ws, w)
		}
		pause(ctx, time.Second)
		before := srv.ops.snapshot()
		p := startPaced(ctx, e, c, shards, sz.T8FanRate)
		pause(ctx, sz.T8FanWindow)
		n, perr := p.end()
		d := opsSince(srv.ops.snapshot(), before)
		var serr error
		for _, w := range ws {
			serr = errors.Join(serr, w.stop())
		}
		if err := errors.Join(perr, serr); err != nil {
			return targetCheck{}, err
		}
		wins = append(wins, win{subs, reads(d), n})
		e.note("fan-out: %d subscribers: %.0f reads for %d appends (%s)", subs, reads(d), n, fmtOps(d))
	}
	// Reads per second, less the window without subscribers: what the
	// subscriptions caused. (Per append too, in the detail: the
	// subscriptions' reads slow the appends down on Azurite, which
	// serves one request at a time, so the windows' appends differ.)
	secs := sz.T8FanWindow.Seconds()
	one, many := (wins[1].reads-wins[0].reads)/secs, (wins[2].reads-wins[0].reads)/secs
	per := func(w win) float64 { return w.reads / float64(max(1, w.appends)) }
	detail := fmt.Sprintf("%d busy shards appended at up to %d/s, %v windows; reads/s less a window without subscribers: %d subscribers %.1f, 1 subscriber %.1f (none: %.1f); appends in the windows %d, %d, %d; reads per append %.2f, %.2f, %.2f",
		sz.T8FanShards, sz.T8FanRate, sz.T8FanWindow, sz.T8FanSubs, many, one, wins[0].reads/secs,
		wins[0].appends, wins[1].appends, wins[2].appends, per(wins[0]), per(wins[1]), per(wins[2]))
	return t8Row("8c", many/one, detail), nil
}

// watchLatest subscribes from the shards' ends.
func watchLatest(ctx context.Context, c *client.Client, prefix string) (*watcher, error) {
	ctx, cancel := context.WithCancel(ctx)
	sub, err := c.Subscribe(ctx, prefix, client.SubscribeOptions{Start: client.StartLatest})
	if err != nil {
		cancel()
		return nil, err
	}
	w := &watcher{cancel: cancel, done: make(chan error, 1)}
	go func() {
		defer sub.Close()
		for batch, err := range sub.Batches() {
			if err != nil {
				if ctx.Err() != nil {
					err = nil
				}
				w.done <- err
				return
			}
			w.n.Add(int64(len(batch.Records)))
		}
		w.done <- nil
	}()
	return w, nil
}

// throughput: 8d.
func (e *t8Env) throughput(ctx context.Context) (_ targetCheck, err error) {
	sz := e.b.cfg.sizes
	root := e.b.base() + "/t8thr"
	shards := make([]string, sz.T8BacklogShards)
	for i := range shards {
		shards[i] = fmt.Sprintf("%s/s-%03d", root, i)
	}
	srv, err := e.inproc(ctx, "thr", func(string) string { return "shard" }, nil)
	if err != nil {
		return targetCheck{}, err
	}
	defer func() { err = errors.Join(err, srv.close()) }()
	c := srv.srv.conn
	const batch = 100
	per := max(batch, sz.T8Backlog/len(shards)/batch*batch)
	e.b.progress.say("target 8: throughput: filling %d records of 1 KiB in %d shards", per*len(shards), len(shards))
	fill := time.Now()
	var jobs []string
	for _, sh := range shards {
		for range per / batch {
			jobs = append(jobs, sh)
		}
	}
	if err := appendAll(ctx, c, jobs, 8, func(string) []*rolloutv1.Record { return e.records(batch) }); err != nil {
		return targetCheck{}, err
	}
	total := int64(per * len(shards))
	e.note("throughput: backlog of %d records in %d shards filled in %.1f s", total, len(shards), time.Since(fill).Seconds())
	pause(ctx, 2*time.Second)
	var subRates, scanRates, ratios []float64
	for r := range max(1, sz.T8Rounds) {
		runs := []func() (float64, error){
			func() (float64, error) { return e.drainSubscribe(ctx, c, root, total) },
			func() (float64, error) { return e.drainScan(ctx, c, shards, total) },
		}
		var got [2]float64
		for k := range runs {
			i := (k + r) % 2
			secs, err := runs[i]()
			if err != nil {
				return targetCheck{}, err
			}
			got[i] = float64(total) / secs
		}
		subRates, scanRates, ratios = append(subRates, got[0]), append(scanRates, got[1]), append(ratios, got[0]/got[1])
		e.note("throughput round %d: Subscribe %.0f records/s (%.1f s), Scan %.0f records/s (%.1f s)", r+1, got[0], float64(total)/got[0], got[1], float64(total)/got[1])
	}
	detail := fmt.Sprintf("median of %d rounds' ratios; %d records of 1 KiB in %d shards; Subscribe median %.0f records/s (%.1f s), Scan shard by shard %.0f records/s (%.1f s)",
		len(ratios), total, len(shards), median(subRates), float64(total)/median(subRates), median(scanRates), float64(total)/median(scanRates))
	return t8Row("8d", median(ratios), detail), nil
}

// drainSubscribe times one subscription from the first records until it
// delivered total records.
func (e *t8Env) drainSubscribe(ctx context.Context, c *client.Client, prefix string, total int64) (float64, error) {
	start := time.Now()
	w, err := watch(ctx, c, prefix, false)
	if err != nil {
		return 0, err
	}
	ok := w.waitCount(ctx, total, 10*time.Minute)
	secs := time.Since(start).Seconds()
	if err := w.stop(); err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("the subscription delivered %d of %d records", w.n.Load(), total)
	}
	return secs, nil
}

// drainScan times plain Scans of each shard in turn.
func (e *t8Env) drainScan(ctx context.Context, c *client.Client, shards []string, total int64) (float64, error) {
	start := time.Now()
	var n int64
	for _, sh := range shards {
		for _, err := range c.Scan(ctx, sh) {
			if err != nil {
				return 0, err
			}
			n++
		}
	}
	if n != total {
		return 0, fmt.Errorf("the scans read %d of %d records", n, total)
	}
	return time.Since(start).Seconds(), nil
}

// gaugeSum sums a metric's samples in g (0 when it has none).
func gaugeSum(g prometheus.Gatherer, name string) float64 {
	fams, err := g.Gather()
	if err != nil {
		return 0
	}
	for _, f := range fams {
		if f.GetName() == name {
			return sum(f)
		}
	}
	return 0
}
