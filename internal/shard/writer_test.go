package shard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

func TestEpochStableAcrossAppends(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store := newStore(t)
		w := open(t, store, "s")
		l := newLedger()
		for i := range 100 {
			rs, err := w.Append(context.Background(), entries(t, fmt.Sprintf("id-%d", i)))
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
			if rs[0].Epoch != w.Epoch() || rs[0].Epoch != 1 {
				t.Fatalf("append %d acked under epoch %d, writer holds %d", i, rs[0].Epoch, w.Epoch())
			}
			if rs[0].Seq != uint64(i+1) {
				t.Fatalf("append %d got seq %d, want %d", i, rs[0].Seq, i+1)
			}
			l.add(t, rs)
		}
		l.verify(t, store, "s")
	})
}

func TestGroupCommitSharesGenerations(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store, puts := newHookStore(newStore(t))
		if _, mem := store.Inner().(*memstore.Store); mem { // so appends pile up behind a commit
			puts.setDelay(2 * time.Millisecond)
		}
		// A commit is the create of one log position: count those, not
		// manifest writes, which are checkpoints.
		creates := store.Count(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.LogPrefix("s")})
		w := open(t, store, "s")
		claimed := creates.N() // the claim's fence, if any
		l := newLedger()
		const clients, perClient = 64, 5
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for i := range perClient {
					rs, err := w.Append(context.Background(), entries(t, fmt.Sprintf("c%d-%d", c, i)))
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					l.add(t, rs)
				}
			})
		}
		wg.Wait()
		appends := clients * perClient
		commits := int(creates.N() - claimed)
		t.Logf("%d appends committed by %d log creates (%.3f blob writes per append)", appends, commits, float64(puts.count("generation")+puts.count("manifest"))/float64(appends))
		if commits > appends/4 {
			t.Errorf("%d appends took %d commits; group commit should share them (want <= %d)", appends, commits, appends/4)
		}
		l.verify(t, store, "s")
	})
}

func TestTwoWritersStaleOneIsFenced(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store := newStore(t)
		ctx := context.Background()
		a := open(t, store, "s")
		l := newLedger()
		rs, err := a.Append(ctx, entries(t, "a1"))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
		b := open(t, store, "s")
		if b.Epoch() <= a.Epoch() {
			t.Fatalf("second writer epoch %d not above first %d", b.Epoch(), a.Epoch())
		}
		_, err = a.Append(ctx, entries(t, "a2"))
		var fe *FencedError
		if !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || fe.Local != a.Epoch() || fe.Stored != b.Epoch() {
			t.Fatalf("stale append: got %v, want ErrFenced with epochs %d/%d", err, a.Epoch(), b.Epoch())
		}
		// The fenced writer stays fenced without touching storage again.
		if _, err := a.Append(ctx, entries(t, "a3")); !errors.Is(err, ErrFenced) {
			t.Fatalf("append after fence: %v, want ErrFenced", err)
		}
		rs, err = b.Append(ctx, entries(t, "b1"))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
		l.verify(t, store, "s")
		if n := countRecords(t, store, "s")["a2"]; n != 0 {
			t.Fatalf("fenced append a2 is visible %d times", n)
		}
	})
}

func TestConcurrentOpensBothSucceed(t *testing.T) {
	store := memstore.New()
	ws := make([]*Writer, 8)
	var wg sync.WaitGroup
	for i := range ws {
		wg.Go(func() {
			w, err := Open(context.Background(), store, "s", testOptions(t))
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			ws[i] = w
		})
	}
	wg.Wait()
	epochs := map[uint64]bool{}
	var newest *Writer
	for _, w := range ws {
		if w == nil {
			t.FailNow()
		}
		defer w.Abort()
		if epochs[w.Epoch()] {
			t.Fatalf("two writers claimed epoch %d", w.Epoch())
		}
		epochs[w.Epoch()] = true
		if newest == nil || w.Epoch() > newest.Epoch() {
			newest = w
		}
	}
	for _, w := range ws {
		_, err := w.Append(context.Background(), entries(t, fmt.Sprintf("e%d", w.Epoch())))
		if w == newest && err != nil {
			t.Errorf("newest writer (epoch %d): %v", w.Epoch(), err)
		}
		if w != newest && !errors.Is(err, ErrFenced) {
			t.Errorf("older writer (epoch %d): %v, want ErrFenced", w.Epoch(), err)
		}
	}
}

// A CAS that landed but whose response was lost must not turn into a false
// fence or a duplicate.
func TestLostManifestResponseIsNotAFence(t *testing.T) {
	for _, lostAs := range []error{blob.ErrOutcomeUnknown, blob.ErrConditionFailed, context.DeadlineExceeded} {
		t.Run(fmt.Sprint(lostAs), func(t *testing.T) {
			store, _ := newHookStore(memstore.New())
			w := open(t, store, "s")
			// The next manifest put lands, and its answer is lost as lostAs.
			store.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName("s"), Fault: faultstore.LoseResponse, Count: 1, Err: lostAs})
			l := newLedger()
			rs, err := w.Append(context.Background(), entries(t, "x"))
			if err != nil {
				t.Fatalf("append whose CAS landed but response was lost: %v", err)
			}
			l.add(t, rs)
			rs, err = w.Append(context.Background(), entries(t, "y"))
			if err != nil {
				t.Fatalf("next append: %v", err)
			}
			l.add(t, rs)
			l.verify(t, store, "s")
		})
	}
}

// The lost response of a commit, the create of a log position, is followed
// at once by another writer's claim, whose fence lands at the next
// position: the first writer must still report success, and then be
// fenced.
func TestLostResponseThenClaimIsSuccess(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store, _ := newHookStore(newStore(t))
		opts := testOptions(t)
		w, err := Open(context.Background(), store, "s", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		var other *Writer
		// The next commit lands; another writer claims at once, and the
		// commit's answer is lost.
		next := faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.LogPrefix("s"), Count: 1}
		store.OnLanded(next, func(faultstore.Call) {
			o, oerr := Open(context.Background(), store.Inner(), "s", testOptions(t))
			if oerr != nil {
				t.Errorf("competing Open: %v", oerr)
			}
			other = o
		})
		store.Add(faultstore.Rule{Ops: next.Ops, Prefix: next.Prefix, Fault: faultstore.LoseResponse, Count: 1})
		l := newLedger()
		rs, err := w.Append(context.Background(), entries(t, "x"))
		if err != nil {
			t.Fatalf("append that landed before the other writer's claim: %v, want success", err)
		}
		l.add(t, rs)
		if other == nil {
			t.Fatal("competing writer did not open")
		}
		defer other.Abort()
		if _, err := w.Append(context.Background(), entries(t, "late")); !errors.Is(err, ErrFenced) {
			t.Fatalf("append after the claim: %v, want ErrFenced", err)
		}
		rs, err = other.Append(context.Background(), entries(t, "y"))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
		l.verify(t, store, "s")
	})
}

func TestCloseCommitsEverythingQueued(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store, puts := newHookStore(newStore(t))
		puts.setDelay(5 * time.Millisecond)
		w := open(t, store, "s")
		l := newLedger()
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() {
				rs, err := w.Append(context.Background(), entries(t, fmt.Sprintf("q%d", i)))
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("append: %v", err)
					}
					return
				}
				l.add(t, rs)
			})
		}
		// Let most appends queue behind the first slow commit, then close.
		for w.QueuedBytes() == 0 {
			runtime.Gosched()
		}
		if err := w.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		wg.Wait()
		if len(l.acks) == 0 {
			t.Fatal("nothing was committed")
		}
		if _, err := w.Append(context.Background(), entries(t, "after")); !errors.Is(err, ErrClosed) {
			t.Fatalf("append after Close: %v, want ErrClosed", err)
		}
		if err := w.Close(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("second Close: %v, want ErrClosed", err)
		}
		// A new writer on the shard sees everything acked.
		w2 := open(t, store, "s")
		if w2.Epoch() != w.Epoch()+1 {
			t.Fatalf("reopen claimed epoch %d, want %d", w2.Epoch(), w.Epoch()+1)
		}
		l.verify(t, store, "s")
	})
}

func TestAbortDuringBurst(t *testing.T) {
	store, puts := newHookStore(memstore.New())
	puts.setDelay(time.Millisecond)
	before := goleak.IgnoreCurrent()
	w, err := Open(context.Background(), store, "s", testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	var wg sync.WaitGroup
	var aborted, unknown atomic.Int32
	for c := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				rs, err := w.Append(context.Background(), entries(t, fmt.Sprintf("c%d-%d", c, i)))
				switch {
				case err == nil:
					l.add(t, rs)
					continue
				case errors.Is(err, ErrAborted):
					aborted.Add(1)
				case errors.Is(err, ErrOutcomeUnknown):
					unknown.Add(1)
				default:
					t.Errorf("append during abort: %v, want ErrAborted or ErrOutcomeUnknown", err)
				}
				return
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	w.Abort()
	wg.Wait()
	w.Abort() // idempotent
	if err := w.Close(context.Background()); !errors.Is(err, ErrAborted) {
		t.Fatalf("Close after Abort: %v, want ErrAborted", err)
	}
	t.Logf("acked %d, aborted %d, outcome unknown %d", len(l.acks), aborted.Load(), unknown.Load())
	if len(l.acks) == 0 {
		t.Fatal("burst acked nothing before the abort")
	}
	goleak.VerifyNone(t, before)
	l.verify(t, store, "s")
	// Whatever was in flight either landed or not; a new writer continues.
	w2 := open(t, store, "s")
	rs, err := w2.Append(context.Background(), entries(t, "after-abort"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)
	l.verify(t, store, "s")
}

func TestAbortIsImmediateWhileStoreHangs(t *testing.T) {
	store, puts := newHookStore(memstore.New())
	w := open(t, store, "s")
	puts.setDelay(time.Hour)
	errc := make(chan error, 1)
	go func() {
		_, err := w.Append(context.Background(), entries(t, "stuck"))
		errc <- err
	}()
	for w.QueuedBytes() == 0 {
		runtime.Gosched()
	}
	time.Sleep(5 * time.Millisecond) // let the commit reach the store
	w.Abort()
	err := <-errc
	if !errors.Is(err, ErrAborted) && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append in flight at Abort: %v", err)
	}
}

func TestCancelledAppendReturnsPromptly(t *testing.T) {
	store, puts := newHookStore(memstore.New())
	w := open(t, store, "s")
	puts.setDelay(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := w.Append(ctx, entries(t, "slow"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Append with expiring ctx: %v", err)
	}
	if d := time.Since(start); d > 150*time.Millisecond {
		t.Fatalf("Append returned after %v; it must not wait for the commit", d)
	}
}

func TestBackpressure(t *testing.T) {
	store, puts := newHookStore(memstore.New())
	opts := testOptions(t)
	opts.MaxQueuedBytes = 1024
	w, err := Open(context.Background(), store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	puts.setDelay(time.Hour)
	big := func(id string) []Entry {
		r := record(id)
		r.Content = strings.Repeat("x", 700)
		e, err := Prepare(r, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return []Entry{e}
	}
	go func() { _, _ = w.Append(context.Background(), big("first")) }()
	for w.QueuedBytes() == 0 {
		runtime.Gosched()
	}
	for range 10 {
		if _, err := w.Append(context.Background(), big("second")); !errors.Is(err, ErrBackpressure) {
			t.Fatalf("append past the queue cap: %v, want ErrBackpressure", err)
		}
	}
	if q := w.QueuedBytes(); q > opts.MaxQueuedBytes {
		t.Fatalf("%d bytes queued with a %d-byte cap", q, opts.MaxQueuedBytes)
	}
}

func TestDroppedWriterIsAbortedByCleanup(t *testing.T) {
	store := memstore.New()
	before := goleak.IgnoreCurrent()
	func() {
		w, err := Open(context.Background(), store, "s", testOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(context.Background(), entries(t, "x")); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		if err := goleak.Find(before); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("dropped writer still has goroutines after GC: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close, Abort and Append race freely; every append ends acked or with one
// of the documented errors, and no acked record is lost.
func TestCloseAbortAppendRace(t *testing.T) {
	for round := range 20 {
		store := memstore.New()
		w, err := Open(context.Background(), store, "s", testOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		l := newLedger()
		var wg sync.WaitGroup
		for c := range 8 {
			wg.Go(func() {
				for i := range 20 {
					rs, err := w.Append(context.Background(), entries(t, fmt.Sprintf("r%d-c%d-%d", round, c, i)))
					switch {
					case err == nil:
						l.add(t, rs)
					case errors.Is(err, ErrClosed), errors.Is(err, ErrAborted), errors.Is(err, ErrOutcomeUnknown):
						return
					default:
						t.Errorf("append: %v", err)
						return
					}
				}
			})
		}
		wg.Go(func() { _ = w.Close(context.Background()) })
		wg.Go(func() { w.Abort() })
		wg.Go(func() { _ = w.Close(context.Background()) })
		wg.Wait()
		l.verify(t, store, "s")
	}
}

// A writer fenced without knowing it, whose manifest lists a generation the
// new owner merged away and deleted, reports ErrFenced on its next append
// instead of a storage not-found. The generation is one the writer
// inherited: it answers for the batches it committed itself from memory,
// and reads nothing for them (presence.go).
func TestStaleWriterFindsItselfFencedWhenItsGenerationsVanish(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	prev := open(t, store, "s")
	if _, err := prev.Append(ctx, entries(t, "x")); err != nil {
		t.Fatal(err)
	}
	if err := prev.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := open(t, store, "s")
	b := open(t, store, "s")
	if _, err := b.Append(ctx, entries(t, "y")); err != nil {
		t.Fatal(err)
	}
	// Delete every generation a knows of, as b's merge and GC would.
	for _, g := range a.w.manifest().GetGenerations() {
		if err := store.Delete(ctx, format.KeyOf(g).Blob("s"), blob.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a.w.opts.Cache.Purge() // forget the cached filters and blobs
	_, err := a.Append(ctx, entries(t, "x"))
	var fe *FencedError
	if !errors.As(err, &fe) || fe.Stored != b.Epoch() {
		t.Fatalf("append on the stale writer: %v, want ErrFenced by epoch %d", err, b.Epoch())
	}
}

// A shard deleted by another instance holds none of its records: a resident
// writer that finds every id of an append committed, in memory or in the
// cache, must not answer "already stored" for them (an acknowledged write
// the tombstone does not hold). It finds itself fenced, and the writer that
// replaces it stores the record again.
func TestStaleWriterDoesNotAnswerPresentAfterADelete(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	a := open(t, store, "s")
	if _, err := a.Append(ctx, entries(t, "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := Delete(ctx, store, "s", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := a.Append(ctx, entries(t, "x"))
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("append of a committed id after the shard was deleted elsewhere: %+v, %v; want ErrFenced", rs, err)
	}
	b := open(t, store, "s")
	rs, err = b.Append(ctx, entries(t, "x"))
	if err != nil || len(rs) != 1 || rs[0].AlreadyPresent {
		t.Fatalf("append on the new writer: %+v, %v; want x stored anew", rs, err)
	}
}
