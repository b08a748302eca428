package follow

import (
	"context"
	"errors"

	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// quick polls fast, so that a test does not wait on backoff.
var quick = Options{PollMin: time.Millisecond, PollMax: 10 * time.Millisecond}

// all reads the shard as a plain (not following) Scan does.
func (e *env) all() []*rolloutv1.Record {
	e.t.Helper()
	var out []*rolloutv1.Record
	if err := e.reader.Scan(context.Background(), "s", shard.ScanOptions{}, func(b shard.Batch) error {
		out = append(out, b.Records...)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// Many followers, started at different cursors with different filters and
// masks while commits land, each get every acknowledged record they select
// once, in seq order, and nothing else.
func TestFanOutDeliversEveryRecordOnceInOrder(t *testing.T) {
	e := newEnv(t, quick)
	e.appendN(5)
	byRollout := func(r *rolloutv1.Record) bool { return r.GetRolloutId() == "r-1" }
	byRole := func(r *rolloutv1.Record) bool { return r.GetRole() == 2 }
	idOnly := func(r *rolloutv1.Record) { r.Content, r.RolloutId = "", "" }
	type spec struct {
		opts   shard.ScanOptions
		filter func(*rolloutv1.Record) bool
		f      *follower
	}
	var specs []*spec
	var tail uint64
	for i := range 40 {
		o := shard.ScanOptions{AfterSeq: uint64(i % 7), BatchRecords: 1 + i%5}
		var filter func(*rolloutv1.Record) bool
		switch i % 4 {
		case 1:
			o.Filter, filter = byRollout, byRollout
		case 2:
			o.Filter, filter, o.Project = byRole, byRole, idOnly
		case 3:
			o.Raw = true
		}
		specs = append(specs, &spec{opts: o, filter: filter, f: e.follow(o, nil)})
		if i%8 == 0 {
			tail = e.appendN(1 + i%4)
		}
	}
	for range 30 {
		tail = e.appendN(1 + rand.IntN(5))
	}
	want := e.all()
	for i, s := range specs {
		s.f.waitFor(t, tail)
		s.f.stop(t)
		got := s.f.records()
		var exp []*rolloutv1.Record
		for _, r := range want {
			if r.GetSeq() > s.opts.AfterSeq && (s.filter == nil || s.filter(r)) {
				exp = append(exp, r)
			}
		}
		if s.opts.Raw {
			continue // raw batches carry encodings; their cursors reached the tail
		}
		if len(got) != len(exp) {
			t.Fatalf("follower %d got %d records, want %d", i, len(got), len(exp))
		}
		for j := range got {
			if got[j].GetSeq() != exp[j].GetSeq() || got[j].GetId() != exp[j].GetId() {
				t.Fatalf("follower %d record %d: got %s/%d, want %s/%d", i, j, got[j].GetId(), got[j].GetSeq(), exp[j].GetId(), exp[j].GetSeq())
			}
			if s.opts.Project != nil && got[j].GetContent() != "" {
				t.Fatalf("follower %d: its field mask was not applied", i)
			}
			if s.opts.Project == nil && got[j].GetContent() != exp[j].GetContent() {
				t.Fatalf("follower %d: another follower's field mask was applied to its records", i)
			}
		}
	}
	if n := e.set.Readers(); n != 0 {
		t.Fatalf("%d readers run after every follower left", n)
	}
}

// rawFollower counts raw records and checks their seqs by the cursor.
func TestRawFollowersSeeEveryRecord(t *testing.T) {
	e := newEnv(t, quick)
	var mu sync.Mutex
	n := 0
	f := e.follow(shard.ScanOptions{Raw: true, BatchRecords: 3}, func(b shard.Batch) {
		mu.Lock()
		n += len(b.Raw)
		mu.Unlock()
	})
	var tail uint64
	for range 20 {
		tail = e.appendN(3)
	}
	f.waitFor(t, tail)
	f.stop(t)
	if n != int(tail) {
		t.Fatalf("raw follower got %d records, want %d", n, tail)
	}
}

// A follower that does not take its batches is dropped from the shared
// reader and catches up on its own; the others keep getting every commit
// meanwhile, and it still gets every record once, in order.
func TestSlowFollowerDoesNotStallOthers(t *testing.T) {
	o := quick
	o.BufferRuns = 2
	e := newEnv(t, o)
	release := make(chan struct{})
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	var once sync.Once
	slow := e.follow(shard.ScanOptions{}, func(shard.Batch) {
		once.Do(func() { <-release })
	})
	t.Cleanup(unblock) // runs before the follower's stop
	fast := e.follow(shard.ScanOptions{}, nil)
	var tail uint64
	for range 20 {
		tail = e.appendN(2)
		fast.waitFor(t, tail) // fails if the slow follower holds up the reader
	}
	// The slow follower's buffer filled: it is out of the reader, holding
	// nothing, and will read on its own.
	e.set.mu.Lock()
	r := e.set.readers["s"]
	e.set.mu.Unlock()
	r.mu.Lock()
	subs := len(r.subs)
	r.mu.Unlock()
	if subs != 1 {
		t.Fatalf("the reader feeds %d followers, want only the fast one", subs)
	}
	unblock()
	slow.waitFor(t, tail)
	for _, f := range []*follower{slow, fast} {
		f.stop(t)
		got := f.records()
		if len(got) != int(tail) {
			t.Fatalf("got %d records, want %d", len(got), tail)
		}
		for i, r := range got {
			if r.GetSeq() != uint64(i+1) {
				t.Fatalf("record %d has seq %d: skipped or repeated", i, r.GetSeq())
			}
		}
	}
}

// Followers join and leave at random cursors while commits land: each sees
// a gap-free run from its cursor, and when the last leaves no reader is
// left running (goleak checks its goroutine is gone).
func TestJoinLeaveRace(t *testing.T) {
	e := newEnv(t, quick)
	e.appendN(3)
	stop := make(chan struct{})
	var appender sync.WaitGroup
	var mu sync.Mutex
	tail := uint64(3)
	appender.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			seq := e.appendN(1 + rand.IntN(3))
			mu.Lock()
			tail = seq
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 15 {
				mu.Lock()
				after := uint64(rand.IntN(int(tail) + 1))
				mu.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rand.IntN(20))*time.Millisecond)
				var got []uint64
				err := e.set.Scan(ctx, "s", shard.ScanOptions{AfterSeq: after, BatchRecords: 1 + i%4}, func(b shard.Batch) error {
					for _, r := range b.Records {
						got = append(got, r.GetSeq())
					}
					return nil
				})
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("follower %d/%d ended with %v", g, i, err)
				}
				for j, s := range got {
					if s != after+uint64(j)+1 {
						t.Errorf("follower %d/%d from %d: record %d has seq %d", g, i, after, j, s)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	appender.Wait()
	if n := e.set.Readers(); n != 0 {
		t.Fatalf("%d readers run after every follower left", n)
	}
}

// N followers cause the store reads per commit one follower does: the
// shard's reader reads each commit once and fans it out. Each follower
// costs no goroutine beyond its caller's.
func TestStoreReadsPerCommitDoNotGrowWithFollowers(t *testing.T) {
	// Only the Notifier wakes the reader, so that every read counted is
	// caused by a commit.
	e := newEnv(t, Options{PollMin: time.Hour, PollMax: time.Hour})
	tail := e.appendN(1)
	perCommit := func(fs []*follower) float64 {
		// Every follower is in: it has seen a commit since it started.
		tail = e.appendN(1)
		for _, f := range fs {
			f.waitFor(t, tail)
		}
		before := e.reads()
		const commits = 10
		for range commits {
			tail = e.appendN(1)
			for _, f := range fs {
				f.waitFor(t, tail)
			}
		}
		return float64(e.reads()-before) / commits
	}
	base := runtime.NumGoroutine()
	fs := []*follower{e.follow(shard.ScanOptions{AfterSeq: tail}, nil)}
	one := perCommit(fs)
	for range 99 {
		fs = append(fs, e.follow(shard.ScanOptions{AfterSeq: tail}, nil))
	}
	many := perCommit(fs)
	t.Logf("store reads per commit: %.1f with one follower, %.1f with %d", one, many, len(fs))
	if many > one+0.5 {
		t.Errorf("store reads per commit grew from %.1f with one follower to %.1f with %d", one, many, len(fs))
	}
	// Each follower here is one goroutine of the test's: the Set adds one
	// reader for the shard, and nothing per follower.
	if g := runtime.NumGoroutine() - base; g > len(fs)+2 {
		t.Errorf("%d followers run %d goroutines, want at most %d", len(fs), g, len(fs)+2)
	}
	if n := e.set.Readers(); n != 1 {
		t.Errorf("%d readers for one shard", n)
	}
}

// A reader whose first read comes before its first follower has joined
// (a loaded machine runs the new goroutine before join adds the follower)
// finds nobody to hand the commit to. The follower must still get it,
// though no later commit or poll comes: the commit's notification went out
// before the reader subscribed.
func TestFollowerJoiningAfterTheFirstReadGetsItsRecords(t *testing.T) {
	read := make(chan error, 1)
	// Reset after the Set's Close (cleanups run last first), when no
	// reader is left to call it.
	t.Cleanup(func() { afterRead = nil })
	afterRead = func(err error) {
		select {
		case read <- err:
		default:
		}
	}
	e := newEnv(t, Options{PollMin: time.Hour, PollMax: time.Hour})
	e.appendN(1)
	tail := e.appendN(1) // nobody subscribed: this notification is lost by design
	s := e.set
	s.mu.Lock()
	tl := s.startLocked("s", shard.PositionAfter(tail-1))
	// Hold the follower back until the reader has read the commit.
	if err := <-read; !errors.Is(err, errNoFollowers) {
		s.mu.Unlock()
		t.Fatalf("first read ended with %v, want errNoFollowers", err)
	}
	sb := tl.add()
	s.mu.Unlock()
	defer sb.leave()
	select {
	case <-sb.ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("reader never handed out seq %d to the follower that joined after its first read", tail)
	}
	recs, dropped := sb.take()
	if dropped || len(recs) != 1 || recs[0].Last() != tail {
		t.Fatalf("follower got %d runs (dropped %v), want the one ending at seq %d", len(recs), dropped, tail)
	}
}

// A follower of a deleted incarnation ends with ErrShardDeleted, as a
// following Scan does; a follower of the shard re-created goes on.
func TestFollowerEndsAtDelete(t *testing.T) {
	e := newEnv(t, quick)
	tail := e.appendN(2)
	f := e.follow(shard.ScanOptions{}, nil)
	f.waitFor(t, tail)
	if _, err := shard.Delete(context.Background(), e.store, "s", shard.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.done:
		f.done = nil
		if !errors.Is(err, shard.ErrShardDeleted) {
			t.Fatalf("follower ended with %v, want ErrShardDeleted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follower did not end at the delete")
	}
	if n := e.set.Readers(); n != 0 {
		t.Fatalf("%d readers left", n)
	}
}

// Close stops the readers and ends the followers still on them with
// ErrClosed, rather than leaving them waiting.
func TestCloseEndsFollowers(t *testing.T) {
	e := newEnv(t, quick)
	tail := e.appendN(1)
	f := e.follow(shard.ScanOptions{}, nil)
	f.waitFor(t, tail)
	e.set.Close()
	select {
	case err := <-f.done:
		f.done = nil
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("follower ended with %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follower still waits on a closed set")
	}
	if n := e.set.Readers(); n != 0 {
		t.Fatalf("%d readers after Close", n)
	}
}

// A follower started on a deleted shard waits for it to be written again,
// and then sees only the new incarnation's records, as a following Scan
// does; so does one that joins the reader of the new incarnation late.
func TestFollowerWaitsForRecreatedShard(t *testing.T) {
	e := newEnv(t, quick)
	e.appendN(1)
	e.w.Abort()
	if _, err := shard.Delete(context.Background(), e.store, "s", shard.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f := e.follow(shard.ScanOptions{}, nil)
	time.Sleep(20 * time.Millisecond) // it polls the tombstone meanwhile
	w2, err := shard.Open(context.Background(), e.store, "s", shard.Options{RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	e.w = w2
	tail := e.appendN(2)
	late := e.follow(shard.ScanOptions{}, nil)
	f.waitFor(t, tail)
	late.waitFor(t, tail)
	for _, f := range []*follower{f, late} {
		f.stop(t)
		var seqs []uint64
		for _, r := range f.records() {
			seqs = append(seqs, r.GetSeq())
		}
		if len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 3 {
			t.Fatalf("a follower of the re-created shard saw seqs %v, want [2 3]", seqs)
		}
	}
}

// A reader with IdleAfter parks once the shard has been idle that long: it
// then reads the store no more, however long it waits, until a commit of
// this process (the Notifier) or Wake; each makes it read, and its
// followers get the records. Without IdleAfter it keeps polling.
func TestIdleReaderParksUntilWoken(t *testing.T) {
	o := quick
	o.IdleAfter = 30 * time.Millisecond
	e := newEnv(t, o)
	tail := e.appendN(1)
	f := e.follow(shard.ScanOptions{}, nil)
	f.waitFor(t, tail)
	parked := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for e.set.Parked() != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the idle reader never parked")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	parked()
	before := e.reads()
	time.Sleep(150 * time.Millisecond) // 15 polls at PollMax, were it polling
	if n := e.reads() - before; n != 0 {
		t.Fatalf("a parked reader read the store %d times", n)
	}

	// A local commit wakes it through the Notifier.
	tail = e.appendN(2)
	f.waitFor(t, tail)
	parked()

	// Another writer's commit (no Notifier: another instance) stays unread
	// until Wake.
	e.w.Abort()
	w2, err := shard.Open(context.Background(), e.store, "s", shard.Options{RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	e.w = w2
	parked()
	tail = e.appendN(1)
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	c := f.cursor
	f.mu.Unlock()
	if c >= tail {
		t.Fatalf("a parked reader read seq %d with no wake", tail)
	}
	e.set.Wake("s")
	f.waitFor(t, tail)
	if n := e.set.Readers(); n != 1 {
		t.Fatalf("%d readers", n)
	}
	if seq, ok := e.set.LastSeq("s"); !ok || seq != tail {
		t.Fatalf("LastSeq = %d, %v; want %d", seq, ok, tail)
	}
}

// Followers that share slots hold records (emit runs) at most len(slots)
// at a time, whether they catch up on their own or take from the shared
// reader, and each still gets every record in order.
func TestSlotsBoundFollowersHoldingRecords(t *testing.T) {
	e := newEnv(t, quick)
	e.appendN(3)
	slots := make(chan struct{}, 2)
	var in, most atomic.Int32
	const n = 12
	type res struct {
		seqs []uint64
		err  error
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan res, n)
	var tail atomic.Uint64
	tail.Store(3 + 10*2 + 1) // what the appends below end at
	for i := range n {
		go func() {
			var seqs []uint64
			err := e.set.ScanSlots(ctx, "s", shard.ScanOptions{AfterSeq: uint64(i % 3), BatchRecords: 1}, slots, func(b shard.Batch) error {
				cur := in.Add(1)
				defer in.Add(-1)
				for {
					m := most.Load()
					if cur <= m || most.CompareAndSwap(m, cur) {
						break
					}
				}
				time.Sleep(time.Millisecond)
				for _, r := range b.Records {
					seqs = append(seqs, r.GetSeq())
				}
				if len(seqs) > 0 && seqs[len(seqs)-1] >= tail.Load() {
					return errStop
				}
				return nil
			})
			results <- res{seqs, err}
		}()
	}
	for range 10 {
		e.appendN(2)
	}
	if last := e.appendN(1); last != tail.Load() {
		t.Fatalf("appends ended at %d, want %d", last, tail.Load())
	}
	for i := range n {
		select {
		case r := <-results:
			if !errors.Is(r.err, errStop) {
				t.Fatalf("follower ended with %v", r.err)
			}
			for j := 1; j < len(r.seqs); j++ {
				if r.seqs[j] != r.seqs[j-1]+1 {
					t.Fatalf("follower %d: seqs %v", i, r.seqs)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatal("followers did not reach the tail")
		}
	}
	if m := most.Load(); m > int32(cap(slots)) {
		t.Fatalf("%d followers held records at once, slots allow %d", m, cap(slots))
	}
}

var errStop = errors.New("stop")
