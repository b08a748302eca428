package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

func TestReappendIsAlreadyPresent(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store := newStore(t)
		w := open(t, store, "s")
		ctx := context.Background()
		first, err := w.Append(ctx, entries(t, "a", "b"))
		if err != nil {
			t.Fatal(err)
		}
		again, err := w.Append(ctx, entries(t, "b", "c", "a"))
		if err != nil {
			t.Fatal(err)
		}
		if !again[0].AlreadyPresent || again[0].Seq != first[1].Seq || again[0].Generation != first[1].Generation {
			t.Errorf("re-append of b = %+v, want already present as %+v", again[0], first[1])
		}
		if again[1].AlreadyPresent || again[1].Seq != 3 {
			t.Errorf("new id c = %+v, want seq 3, not present", again[1])
		}
		if !again[2].AlreadyPresent || again[2].Seq != first[0].Seq {
			t.Errorf("re-append of a = %+v, want already present as %+v", again[2], first[0])
		}
		// A record whose created_at the server filled is still the same record
		// when retried: Prepare hashes the client's encoding.
		late, err := Prepare(record("a"), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := w.Append(ctx, []Entry{late})
		if err != nil || !rs[0].AlreadyPresent {
			t.Fatalf("retry with a different server-filled created_at: %+v, %v", rs, err)
		}
		if n := countRecords(t, store, "s"); n["a"] != 1 || n["b"] != 1 || n["c"] != 1 {
			t.Fatalf("stored counts %v, want each once", n)
		}
	})
}

func TestSameIDDifferentContentConflicts(t *testing.T) {
	store := memstore.New()
	w := open(t, store, "s")
	ctx := context.Background()
	if _, err := w.Append(ctx, entries(t, "a")); err != nil {
		t.Fatal(err)
	}
	r := record("a")
	r.Content = "something else"
	e, err := Prepare(r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(ctx, []Entry{e}); !errors.Is(err, ErrIDConflict) {
		t.Fatalf("same id, different content: %v, want ErrIDConflict", err)
	}
	// The conflict holds for a fresh writer too, which knows only storage.
	w2 := open(t, store, "s")
	if _, err := w2.Append(ctx, []Entry{e}); !errors.Is(err, ErrIDConflict) {
		t.Fatalf("same id, different content, new writer: %v, want ErrIDConflict", err)
	}
}

func TestInFlightIDSharesOutcome(t *testing.T) {
	store, puts := newHookStore(memstore.New())
	puts.setDelay(5 * time.Millisecond)
	w := open(t, store, "s")
	var wg sync.WaitGroup
	res := make([]Result, 16)
	for i := range res {
		wg.Go(func() {
			rs, err := w.Append(context.Background(), entries(t, "same"))
			if err != nil {
				t.Errorf("append: %v", err)
				return
			}
			res[i] = rs[0]
		})
	}
	wg.Wait()
	fresh := 0
	for _, r := range res {
		if !r.AlreadyPresent {
			fresh++
		}
		if r.Seq != res[0].Seq {
			t.Errorf("appends of one id got seqs %d and %d", r.Seq, res[0].Seq)
		}
	}
	if fresh != 1 {
		t.Errorf("%d appends of one id reported storing it, want 1", fresh)
	}
	if n := countRecords(t, store, "s")["same"]; n != 1 {
		t.Fatalf("id stored %d times", n)
	}
}

// Re-appending 1,000 acked ids after a lost response leaves each stored once.
func TestReappendAfterLostResponses(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.DisableMerge = true // merges would take some of the injected faults
	w, err := Open(context.Background(), fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Abort() }()
	ctx := context.Background()
	l := newLedger()
	all := ids("id", 1000)
	// Every 7th log create lands but its response is lost, and the read of
	// the position that would decide it fails too: the append is
	// ErrOutcomeUnknown and the writer stops. The client goes on with its
	// replacement, which fences the log and inherits what landed.
	var unknown []string
	for i := 0; i < len(all); i += 10 {
		batch := all[i : i+10]
		if (i/10)%7 == 3 {
			undo := loseCreate(fs, w)
			_, err := w.Append(ctx, entries(t, batch...))
			undo()
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("append with a lost create response and a failed read of its position: %v, want ErrOutcomeUnknown", err)
			}
			w.Abort()
			if w, err = Open(ctx, fs, "s", opts); err != nil {
				t.Fatal(err)
			}
			unknown = append(unknown, batch...)
			continue
		}
		rs, err := w.Append(ctx, entries(t, batch...))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		l.add(t, rs)
	}
	// The client retries everything it is unsure of, and everything else too.
	for i := 0; i < len(all); i += 100 {
		rs, err := w.Append(ctx, entries(t, all[i:i+100]...))
		if err != nil {
			t.Fatalf("re-append %d: %v", i, err)
		}
		for _, r := range rs {
			if _, acked := l.acks[r.ID]; acked && !r.AlreadyPresent {
				t.Errorf("re-append of acked %q stored it again", r.ID)
			}
			if _, acked := l.acks[r.ID]; !acked {
				l.add(t, []Result{r})
			}
		}
	}
	t.Logf("%d appends had an unknown outcome and were retried", len(unknown)/10)
	counts := countRecords(t, store(fs), "s")
	for _, id := range all {
		if counts[id] != 1 {
			t.Errorf("%q stored %d times, want 1", id, counts[id])
		}
	}
	l.verify(t, fs.Inner(), "s")
}

func store(fs *faultstore.Store) blob.Store { return fs.Inner() }

// loseCreate makes w's next log create land with its response lost, and
// every read of that position fail until undo: the create's outcome stays
// undecided.
func loseCreate(fs *faultstore.Store, w *Writer) (undo func()) {
	w.w.mu.Lock()
	next := format.LogName(w.w.shard, w.w.last+1)
	w.w.mu.Unlock()
	rm1 := fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: next, Fault: faultstore.LoseResponse, Count: 1})
	rm2 := fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: next, Fault: faultstore.Fail, Err: errors.New("injected permanent read failure")})
	return func() { rm1(); rm2() }
}

func TestCommitAfterUnknownOutcomeRechecksIDs(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.DisableMerge = true
	w, err := Open(context.Background(), fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Abort() }()
	ctx := context.Background()
	undo := loseCreate(fs, w)
	if _, err := w.Append(ctx, entries(t, "x", "y")); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("got %v, want ErrOutcomeUnknown", err)
	}
	undo()
	// The writer stopped; its replacement must learn from storage that x
	// and y landed, not store them again.
	w.Abort()
	if w, err = Open(ctx, fs, "s", opts); err != nil {
		t.Fatal(err)
	}
	rs, err := w.Append(ctx, entries(t, "y", "z", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].AlreadyPresent || rs[1].AlreadyPresent || !rs[2].AlreadyPresent {
		t.Fatalf("retry results %+v: want y, x present and z new", rs)
	}
	for id, n := range countRecords(t, fs.Inner(), "s") {
		if n != 1 {
			t.Errorf("%q stored %d times", id, n)
		}
	}
}

// Checking ids costs no read on the common path: the writer caches the
// filters of the generations it wrote, and they rule new ids out.
func TestAppendOfNewIDsReadsNothing(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.DisableMerge = true // merges read their sources
	w, err := Open(context.Background(), fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	fs.ResetCounts()
	// One create of a log position per commit; the checkpointer's manifest
	// puts ride beside them and are not counted here.
	var creates atomic.Int64
	logPrefix := format.LogPrefix("s")
	fs.SetHooks(faultstore.Hooks{Before: func(c faultstore.Call) {
		if c.Op == faultstore.OpPut && strings.HasPrefix(c.Name, logPrefix) {
			creates.Add(1)
		}
	}})
	for i := range 50 {
		if _, err := w.Append(context.Background(), entries(t, ids(fmt.Sprint("n", i), 4)...)); err != nil {
			t.Fatal(err)
		}
	}
	if g, h, p := fs.Calls(faultstore.OpGet), fs.Calls(faultstore.OpHead), creates.Load(); g != 0 || h != 0 || p != 50 {
		t.Fatalf("50 appends of new ids made %d gets, %d heads, %d log creates; want 0, 0, 50", g, h, p)
	}
}
