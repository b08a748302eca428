package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

func mergeOptions(t testing.TB) Options {
	o := testOptions(t)
	o.MergeRun = 4
	o.MergeMaxGenerations = 8
	o.MergeInterval = 5 * time.Millisecond
	// Long enough to cover one Get on a loaded machine, short enough that
	// GC deletes retired generations while the tests run.
	o.RetireGrace = 500 * time.Millisecond
	// Short, so that tests whose appends stop see merges land soon.
	o.EditDelay = 20 * time.Millisecond
	return o
}

// mergerOnlyOptions wake the merger only after commits, for tests of the merger's own edits.
func mergerOnlyOptions(t testing.TB) Options {
	o := testOptions(t)
	o.MergeRun = 4
	o.MergeInterval = time.Hour
	return o
}

// Merges under continuous appends, read throughout by another instance's
// reader: every acked record stays readable, exactly once, and no Get fails.
func TestMergeUnderLoadKeepsEveryRecordReadable(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store := newStore(t)
		w, err := Open(context.Background(), store, "s", mergeOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		l := newLedger()
		reader := NewReader(store, ReaderOptions{})
		ctx := context.Background()
		var stop atomic.Bool
		var wg sync.WaitGroup
		var acked sync.Map
		for c := range 4 {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					id := fmt.Sprintf("c%d-%d", c, i)
					rs, err := w.Append(ctx, entries(t, id))
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					l.add(t, rs)
					acked.Store(id, rs[0].Seq)
				}
			})
		}
		var reads atomic.Int64
		wg.Go(func() {
			for !stop.Load() {
				acked.Range(func(k, v any) bool {
					rec, err := reader.Get(ctx, "s", k.(string))
					if err != nil {
						t.Errorf("Get(%q) during merges: %v", k, err)
						return false
					}
					if rec.GetSeq() != v.(uint64) {
						t.Errorf("Get(%q) seq %d, acked %d", k, rec.GetSeq(), v)
					}
					reads.Add(1)
					return !stop.Load()
				})
			}
		})
		deadline := time.Now().Add(30 * time.Second)
		for w.Stats().Merges < 10 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		stop.Store(true)
		wg.Wait()
		st := w.Stats()
		t.Logf("%d acked, %d reads, %d merges, %d live generations, %d retired, %d deleted by GC", len(l.acks), reads.Load(), st.Merges, st.Generations, st.Retired, st.GCDeletedBlobs)
		if st.Merges < 10 {
			t.Fatalf("only %d merges ran", st.Merges)
		}
		// Under load the count may overshoot while a merge is in flight;
		// once appends stop, merging must bring it under the bound.
		waitFor(t, "live generations to come under 2x the count trigger", func() bool {
			return w.Stats().Generations <= 2*8
		})
		l.verify(t, store, "s")
	})
}

// A fault at each step of a merge (reading a source, writing the merged
// generation, the CAS that swaps it in, deleting the retired sources),
// followed by a reopen, loses and duplicates nothing.
func TestMergeFaultsThenReopen(t *testing.T) {
	genPrefix := format.GenerationPrefix("s")
	for _, tc := range []struct {
		name string
		rule faultstore.Rule
	}{
		{"source read fails", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: genPrefix, Fault: faultstore.Fail, Prob: 0.5}},
		{"merged write fails", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: genPrefix, Fault: faultstore.Fail, Prob: 0.3}},
		{"merged write response lost", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: genPrefix, Fault: faultstore.LoseResponse, Prob: 0.3}},
		{"manifest CAS fails", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName("s"), Fault: faultstore.Fail, Prob: 0.3}},
		{"manifest CAS response lost", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName("s"), Fault: faultstore.LoseResponse, Prob: 0.3}},
		{"delete fails", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpDelete}, Fault: faultstore.Fail, Prob: 0.5}},
		{"delete response lost", faultstore.Rule{Ops: []faultstore.Op{faultstore.OpDelete}, Fault: faultstore.LoseResponse, Prob: 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultstore.New(memstore.New(), 7)
			w, err := Open(context.Background(), fs, "s", mergeOptions(t))
			if err != nil {
				t.Fatal(err)
			}
			fs.Add(tc.rule)
			l := newLedger()
			ctx := context.Background()
			for i := range 60 {
				batch := ids(fmt.Sprintf("b%d", i), 3)
				// A client retries an unclear append with the same ids.
				for try := 0; ; try++ {
					rs, err := w.Append(ctx, entries(t, batch...))
					if err == nil {
						l.add(t, rs)
						break
					}
					if !errors.Is(err, ErrOutcomeUnknown) && !errors.Is(err, ErrFenced) && try > 20 {
						t.Fatalf("append %d keeps failing: %v", i, err)
					}
					if errors.Is(err, ErrFenced) {
						t.Fatalf("false fence: %v", err)
					}
				}
			}
			time.Sleep(30 * time.Millisecond) // let a merge and GC run into the faults
			w.Abort()
			fs.Clear()
			// Whatever the merge left behind, a new writer sees each acked
			// record exactly once, and its GC finishes the job.
			w2, err := Open(ctx, fs, "s", mergeOptions(t))
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Abort()
			if _, err := w2.Append(ctx, entries(t, "after")); err != nil {
				t.Fatal(err)
			}
			l.verify(t, fs.Inner(), "s")
			t.Logf("merges before reopen %d; injected faults: get %d, put %d, delete %d", w.Stats().Merges, fs.Injected(faultstore.OpGet), fs.Injected(faultstore.OpPut), fs.Injected(faultstore.OpDelete))
		})
	}
}

// Merging the small generations a writer just wrote reads nothing back: they
// are still in the cache.
func TestMergeOfRecentGenerationsReadsNothing(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	w, err := Open(context.Background(), fs, "s", mergeOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	fs.ResetCounts()
	for i := range 40 {
		if _, err := w.Append(context.Background(), entries(t, fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The merger alone merges, in few, large passes.
	waitFor(t, "merges", func() bool { st := w.Stats(); return st.Merges >= 2 && st.Generations <= 8 })
	if g := fs.Calls(faultstore.OpGet); g != 0 {
		t.Fatalf("%d merges of recent generations made %d GETs, want 0", w.Stats().Merges, g)
	}
}

// Close commits a merge whose output is written and whose edit waits for a
// commit, rather than leaving that output an orphan for a later epoch.
func TestCloseCommitsAWaitingMergeEdit(t *testing.T) {
	store := memstore.New()
	opts := mergerOnlyOptions(t)
	opts.EditDelay = time.Hour
	// Under protocol v2, log batches merge MergeMaxSources at a time at
	// most, and the edit waits for the tail's checkpoint, which only
	// Close writes here.
	opts.MergeMaxSources = 4
	opts.CheckpointInterval = time.Hour
	w, err := Open(context.Background(), store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	l := newLedger()
	for i := range 4 {
		rs, err := w.Append(context.Background(), entries(t, fmt.Sprint("a", i)))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
	}
	waitFor(t, "the merge's edit to be queued", func() bool {
		w.w.mu.Lock()
		defer w.w.mu.Unlock()
		return len(w.w.edits) == 1
	})
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, _, err := shardlog.ReadManifest(context.Background(), store, "s")
	if err != nil {
		t.Fatal(err)
	}
	if n, r := len(m.GetGenerations()), retiredCount(m); n != 1 || r != 4 {
		t.Fatalf("after Close: %d live and %d retired generations; want the merge committed: 1 and 4", n, r)
	}
	l.verify(t, store, "s")
}
