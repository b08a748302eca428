package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// The race hunter's scenarios, one per family (racehunt_families_test.go).

const (
	// huntHealBound: after a partition heals, a new append to the shard
	// must succeed on the same writer set within this.
	huntHealBound = 5 * time.Second
	// huntStopBound: no append waits longer than this after its writer
	// stopped. The lag-bound scenario's writer has a 1 s CommitTimeout, and
	// a commit that ignores the stop waits out most of it (0.9–1.3 s
	// measured); a commit in flight may still finish a couple of store
	// calls, which the scenario slows by up to 200 ms each.
	huntStopBound = 700 * time.Millisecond
	// huntDeleteShard is the one shard the hunter deletes. Only fresh ids
	// are appended to it: a new incarnation forgets the old one's ids.
	huntDeleteShard = "hunt/d0"
	// huntFenceShard is the late-fence scenario's shard, which the chaos
	// leaves alone: its claims would keep merges from ever collecting a
	// position. Only fresh ids are appended to it.
	huntFenceShard = "hunt/f0"
	// huntPartitionShard is the partition scenario's shard, which the chaos
	// leaves alone: its claims would replace a wedged writer, as a fence
	// does, and hide the wedge. Only fresh ids are appended to it.
	huntPartitionShard = "hunt/p0"
	// huntLagShard is the lag-bound scenario's shard, which the chaos
	// leaves alone: its claims would stop the writer before commits wait
	// at the bound. Only fresh ids are appended to it.
	huntLagShard = "hunt/l0"
)

// partition starts an instance of its own that holds a writer of a shard
// for every shard (no eviction can replace it), keeps appending to
// hunt/p0 through it, and cuts off, for 2–3 × CommitTimeout, either the
// shard's log names for every instance or all of that instance's store
// traffic: calls fail, lose their answer, or hang. After the heal, an
// append on that instance must succeed within huntHealBound.
func (h *hunter) partition() {
	s := huntPartitionShard
	own := faultstore.NewPartitioned(h.part)
	svc := h.startInstance(own, huntShards+1)
	defer h.retireInstance(svc)
	var (
		acked   atomic.Int64 // when the last append was acknowledged (UnixNano)
		lastErr atomic.Pointer[error]
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for range 3 {
		wg.Go(func() {
			for !huntClosed(done) {
				es := h.entries(s, 3, idMix{})
				ctx, cancel := context.WithTimeout(context.Background(), h.rng.between(50*time.Millisecond, 400*time.Millisecond))
				rs, err := huntAppend(ctx, svc, s, es)
				cancel()
				h.answered(s, es, rs, err)
				if err == nil {
					acked.Store(time.Now().UnixNano())
					continue
				}
				lastErr.Store(&err)
				time.Sleep(h.rng.between(time.Millisecond, 10*time.Millisecond))
			}
		})
	}
	defer func() { close(done); wg.Wait() }()
	if !huntWaitFor(500*time.Millisecond, func() bool { return acked.Load() != 0 }) {
		return // no writer to wedge
	}
	modes := []faultstore.CutMode{faultstore.CutLose, faultstore.CutHang, faultstore.CutHang, faultstore.CutFail}
	cut := faultstore.Cut{Mode: modes[h.rng.intN(len(modes))]}
	what, on := "all store traffic of one instance", own
	if h.rng.chance(0.5) {
		cut.Prefixes = []string{format.LogPrefix(s)}
		what, on = "the shard's log names, for every instance", h.part
	}
	heal := on.Cut(cut)
	h.count("partition-" + cut.Mode.String())
	stretch := h.rng.between(2*huntCommitTimeout, 3*huntCommitTimeout)
	time.Sleep(stretch)
	heal()
	healed := time.Now()
	if !huntWaitFor(huntHealBound, func() bool { return acked.Load() > healed.UnixNano() }) {
		var last error
		if p := lastErr.Load(); p != nil {
			last = *p
		}
		h.violate(famPartition, "%s is wedged: no append to it on the same writer set succeeded within %v after a partition of %s (%v, %v, CommitTimeout %v) healed; the last answer: %v",
			s, huntHealBound, what, cut.Mode, stretch.Round(time.Millisecond), huntCommitTimeout, last)
	}
}

func huntClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// huntAck is an acknowledged record, for the readers.
type huntAck struct {
	id  string
	seq uint64
	at  time.Time
}

// huntAcks keeps the records acknowledged in a scenario.
type huntAcks struct {
	mu   sync.Mutex
	list []huntAck
}

// huntAcksKept bounds huntAcks.
const huntAcksKept = 4000

func (a *huntAcks) add(es []shard.Entry, rs []shard.Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for i, r := range rs {
		a.list = append(a.list, huntAck{es[i].ID, r.Seq, now})
	}
	if len(a.list) > huntAcksKept {
		a.list = append(a.list[:0:0], a.list[len(a.list)-huntAcksKept:]...)
	}
}

// between returns up to n of the records acknowledged between from and
// to, the latest first.
func (a *huntAcks) between(from, to time.Time, n int) []huntAck {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []huntAck
	for i := len(a.list) - 1; i >= 0 && len(out) < n && !a.list[i].at.Before(from); i-- {
		if !a.list[i].at.After(to) {
			out = append(out, a.list[i])
		}
	}
	return out
}

// since returns up to n of the records acknowledged at or after from, the
// earliest first.
func (a *huntAcks) since(from time.Time, n int) []huntAck {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := len(a.list)
	for i > 0 && !a.list[i-1].at.Before(from) {
		i--
	}
	return append([]huntAck(nil), a.list[i:min(i+n, len(a.list))]...)
}

// lateFence appends to hunt/f0 through an instance of its own and reads
// what was acknowledged back through that instance's BatchGet and Get
// handlers, whose reader shares the writers' cache; meanwhile a third
// instance claims the shard with its fence create held until the position
// it names was written and collected by merge and GC (lateClaim). Record
// reads of the shard's log wait for that late fence to land (or their
// deadline): reads slower than the retire grace, under which the store
// changed. No read may answer DATA_LOSS, and every acknowledged record must
// be found at its seq.
//
// The readers that can meet the late fence are few: one must locate
// records of the fence's position p while its view still lists p (between
// the commit of p and the merge that retires it, some 100 ms), through the
// writers' cache that holds p's index, and be patient until the fence lands.
// The readers polling at random were mostly held in earlier reads then, so
// the moment p is written (the claim's create sees it) starts a burst of
// patient BatchGets of the records acknowledged since (burstReads).
func (h *hunter) lateFence() {
	s := huntFenceShard
	// An instance of its own, holding a writer of every shard: evictions
	// would replace its writer before merges and GC collect anything.
	svc := h.startInstance(h.part, huntShards+1)
	defer h.retireInstance(svc)
	// Record reads wait until the late fence landed, or the scenario ends.
	wake := make(chan struct{})
	var once sync.Once
	wakeReads := func() { once.Do(func() { close(wake) }) }
	h.viewsOf(svc).slowRanged(format.LogPrefix(s), 4*time.Second, wake)
	var (
		acks huntAcks
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	for range 2 {
		wg.Go(func() {
			for !huntClosed(done) {
				es := h.entries(s, 3, idMix{})
				ctx, cancel := context.WithTimeout(context.Background(), h.rng.between(50*time.Millisecond, 400*time.Millisecond))
				rs, err := huntAppend(ctx, svc, s, es)
				cancel()
				h.answered(s, es, rs, err)
				if err == nil {
					acks.add(es, rs)
				} else {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	// The readers ask for what was acknowledged around the claim: the
	// position its fence is meant for was written then.
	var claimed atomic.Int64
	for range 8 {
		wg.Go(func() {
			for !huntClosed(done) {
				time.Sleep(h.rng.between(0, 200*time.Millisecond))
				now, from := time.Now(), time.Now().Add(-500*time.Millisecond)
				if c := claimed.Load(); c != 0 && h.rng.chance(0.7) {
					from = time.Unix(0, c).Add(-100 * time.Millisecond)
					now = from.Add(400 * time.Millisecond)
				}
				if want := acks.between(from, now, 100); len(want) > 0 {
					h.readBack(svc, s, want, h.rng.between(200*time.Millisecond, 4*time.Second))
				}
			}
		})
	}
	written := make(chan time.Time, 1)
	wg.Go(func() { h.burstReads(svc, s, &acks, written, done, &wg) })
	time.Sleep(h.rng.between(20*time.Millisecond, 60*time.Millisecond))
	claimed.Store(time.Now().UnixNano())
	h.lateClaim(s, func() { written <- time.Now() }, wakeReads)
	time.Sleep(h.rng.between(50*time.Millisecond, 200*time.Millisecond))
	close(done)
	wakeReads()
	wg.Wait()
}

// burstReads waits until the late fence's position was written (a time on
// written), then for 400 ms starts a patient BatchGet every 5-20 ms, in
// goroutines of wg, of the records acknowledged since just before: those of
// the fence's position among them, located while the view lists it, and
// read back only once the fence landed there.
func (h *hunter) burstReads(svc *service, s string, acks *huntAcks, written <-chan time.Time, done chan struct{}, wg *sync.WaitGroup) {
	var at time.Time
	select {
	case at = <-written:
	case <-done:
		return
	}
	h.count("late-fence-burst")
	for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end) && !huntClosed(done); {
		time.Sleep(h.rng.between(5*time.Millisecond, 20*time.Millisecond))
		if want := acks.since(at.Add(-20*time.Millisecond), 40); len(want) > 0 {
			wg.Go(func() { h.readBack(svc, s, want, 5*time.Second) })
		}
	}
}

// lateClaim claims a shard as another instance would, with the create of
// its fence held back on the way to the store until its position has been
// written by the writer it fences and collected since by a merge and GC
// (or for a while, or a random delay): then it lands in the collected
// position. written is called once when that position was written, landed
// once the create landed there after it was collected.
func (h *hunter) lateClaim(s string, written, landed func()) {
	h.count("late-claim")
	max, blind := 3*time.Second, false
	if h.rng.chance(0.1) {
		max, blind = h.rng.between(50*time.Millisecond, 400*time.Millisecond), true
	}
	view, collected := h.lateCreate(format.LogPrefix(s), max, blind, written, landed)
	opts := h.writerOptions(nil)
	opts.CommitTimeout = 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	w, err := shard.Open(ctx, view, s, opts)
	cancel()
	if collected.Load() {
		h.count("late-fence-collected")
	}
	if err == nil {
		h.release(w)
	}
}

// lateCreate returns a view of h.part that holds the first create under
// prefix on its way to the store until the position it names was created
// and then deleted (looked at in h.inner, without faults), or for max;
// blind holds it for max. written is called once the position was seen
// written, landed once the create landed in a collected position;
// collected tells whether it was.
func (h *hunter) lateCreate(prefix string, max time.Duration, blind bool, written, landed func()) (view *faultstore.Store, collected *atomic.Bool) {
	view = faultstore.New(h.part, 1) // no rules: the seed is unused
	collected = new(atomic.Bool)
	var held atomic.Pointer[string]
	first := faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: prefix, Count: 1}
	view.Intercept(first, func(ctx context.Context, c faultstore.Call) error {
		held.Store(&c.Name)
		seen := false
		huntWaitFor(max, func() bool {
			if blind || ctx.Err() != nil {
				return ctx.Err() != nil
			}
			_, err := h.inner.Head(ctx, c.Name)
			switch {
			case err == nil:
				if !seen {
					written()
				}
				seen = true
			case errors.Is(err, blob.ErrNotFound) && seen:
				collected.Store(true)
				return true
			}
			return false
		})
		return nil // then it goes out, whatever ctx says, as it would have
	})
	var once sync.Once
	view.OnLanded(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: prefix}, func(c faultstore.Call) {
		if p := held.Load(); p != nil && *p == c.Name && c.Err == nil && collected.Load() {
			once.Do(landed)
		}
	})
	return view, collected
}

// readBack reads acknowledged records through an instance's BatchGet
// handler, and sometimes one through Get. No blob is ever corrupted, so
// DATA_LOSS is always wrong; storage errors are not.
// patience bounds the read: a patient one waits for the late fence.
func (h *hunter) readBack(svc *service, s string, want []huntAck, patience time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if h.rng.chance(0.2) {
		a := want[h.rng.intN(len(want))]
		resp, err := svc.Get(ctx, &rolloutv1.GetRequest{Shard: s, Id: a.id})
		switch {
		case status.Code(err) == codes.DataLoss:
			h.violate(famLateFence, "Get of %s/%s answered DATA_LOSS, and no blob is corrupted: %v", s, a.id, err)
		case status.Code(err) == codes.NotFound:
			h.violate(famLateFence, "Get of %s/%s, acknowledged at seq %d, answered NOT_FOUND: %v", s, a.id, a.seq, err)
		case err == nil && resp.GetRecord().GetSeq() != a.seq:
			h.violate(famLateFence, "Get of %s/%s, acknowledged at seq %d, read seq %d", s, a.id, a.seq, resp.GetRecord().GetSeq())
		}
		return
	}
	ids := make([]string, len(want))
	for i, a := range want {
		ids[i] = a.id
	}
	resp, err := svc.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: s, Ids: ids})
	if status.Code(err) == codes.DataLoss {
		h.violate(famLateFence, "BatchGet of %s %v answered DATA_LOSS, and no blob is corrupted: %v", s, ids, err)
		return
	}
	if err != nil {
		return
	}
	for i, r := range resp.GetResults() {
		switch {
		case r.GetNotFound():
			h.violate(famLateFence, "BatchGet of %s: %s, acknowledged at seq %d, not found", s, want[i].id, want[i].seq)
		case r.GetRecord() != nil && r.GetRecord().GetSeq() != want[i].seq:
			h.violate(famLateFence, "BatchGet of %s: %s, acknowledged at seq %d, read at seq %d", s, want[i].id, want[i].seq, r.GetRecord().GetSeq())
		}
	}
}

// slowRanged delays the instance's ranged reads (a Get with a length: a
// record's bytes, not a probe or a footer) of names under prefix, for d or
// until wake is closed (when a late create landed): a reader that located
// records in a manifest reads them only after the store changed under it.
func (v *huntViews) slowRanged(prefix string, d time.Duration, wake chan struct{}) {
	ranged := faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: prefix,
		If: func(c faultstore.Call) bool { return c.GetOpts.Length != 0 }}
	v.reads.Intercept(ranged, func(ctx context.Context, c faultstore.Call) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("slowed ranged read of %s: %w", c.Name, ctx.Err())
		}
		return nil
	})
}

// lagBound opens, on hunt/l0, a third-instance writer whose checkpoints are slow (and
// whose checkpoint CAS sometimes loses its answer), with K = 2, so that
// commits soon wait at the 2K lag bound; keeps appending to it; and, while
// its checkpoint is on its way, claims the shard from another instance, so
// that the checkpoint loses its CAS and the writer stops as fenced. No
// append may be answered more than huntStopBound after the writer stopped.
func (h *hunter) lagBound() {
	s := huntLagShard
	view := faultstore.New(h.part, int64(h.rng.intN(1<<30)))
	opts := h.writerOptions(nil)
	opts.CheckpointEvery, opts.CheckpointInterval, opts.CommitTimeout = 2, time.Second, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	w, err := shard.Open(ctx, view, s, opts)
	cancel()
	if err != nil {
		return
	}
	defer w.Abort()
	slow := h.rng.between(60*time.Millisecond, 200*time.Millisecond)
	view.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName(s), Fault: faultstore.Delay, Delay: slow})
	if h.rng.chance(0.3) {
		view.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName(s), Fault: faultstore.LoseResponse, Prob: 0.5})
	}
	var (
		stopped atomic.Int64 // when w.Err() was first seen set (UnixNano)
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for !huntClosed(done) && stopped.Load() == 0 {
			if w.Err() != nil {
				stopped.Store(time.Now().UnixNano())
			}
			time.Sleep(time.Millisecond)
		}
	})
	for range 4 {
		wg.Go(func() {
			for !huntClosed(done) && w.Err() == nil {
				es := h.entries(s, 3, idMix{})
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				rs, err := huntRawAppend(ctx, w, es)
				cancel()
				answered := time.Now()
				h.answered(s, es, rs, err)
				if at := stopped.Load(); err != nil && at != 0 {
					if waited := answered.Sub(time.Unix(0, at)); waited > huntStopBound {
						h.violate(famLagBound, "an append to %s was answered %v after its writer stopped (%v), with: %v",
							s, waited.Round(time.Millisecond), w.Err(), err)
					}
				}
			}
		})
	}
	time.Sleep(h.rng.between(slow/3, 2*slow/3))
	h.claim(s, "lag-claim")
	time.Sleep(h.rng.between(100*time.Millisecond, 300*time.Millisecond))
	close(done)
	wg.Wait()
}
