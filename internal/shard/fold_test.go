package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// foldOptions leave the merger nothing to do on its own but what the tests
// arrange: no time trigger, no count trigger within the tests' sizes.
func foldOptions(t testing.TB) Options {
	o := testOptionsV1(t)
	o.MergeRun = 4
	o.MergeInterval = time.Hour
	o.MergeAge = time.Hour
	return o
}

// A lone client's fourth append writes its record together with the three
// small generations before it, as one generation, and retires them in the
// same CAS: no separate merge PUT, no separate manifest write.
func TestCommitFoldsTheNewestGenerations(t *testing.T) {
	hs := newHookStore(memstore.New())
	w, err := Open(context.Background(), hs, "s", foldOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	l := newLedger()
	appendOne := func(id string) []Result {
		t.Helper()
		rs, err := w.Append(context.Background(), entries(t, id))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
		return rs
	}
	var first Result
	for i := range 3 {
		rs := appendOne(fmt.Sprint("a", i))
		if i == 0 {
			first = rs[0]
		}
	}
	if st := w.Stats(); st.Generations != 3 || st.Folds != 0 {
		t.Fatalf("after 3 appends: %d generations, %d folds; want 3, 0", st.Generations, st.Folds)
	}
	manifests := hs.count("manifest")
	last := appendOne("a3")[0]

	st := w.Stats()
	if st.Folds != 1 || st.Generations != 1 || st.Retired != 3 {
		t.Fatalf("after the 4th append: %d folds, %d live, %d retired generations; want 1, 1, 3", st.Folds, st.Generations, st.Retired)
	}
	if got := hs.count("generation"); got != 4 {
		t.Fatalf("%d generation PUTs for 4 appends, want 4 (a merge PUT of its own is what folding saves)", got)
	}
	if got := hs.count("manifest") - manifests; got != 1 {
		t.Fatalf("the folding append made %d manifest writes, want 1", got)
	}
	g := w.w.manifest().GetGenerations()[0]
	if g.GetNumber() != last.Generation || g.GetFirstSeq() != first.Seq || g.GetLastSeq() != last.Seq || g.GetRecords() != 4 || g.GetLevel() != 1 {
		t.Fatalf("folded generation %v; want number %d, seqs %d..%d, 4 records, level 1", g, last.Generation, first.Seq, last.Seq)
	}
	// Folded records keep their sequence numbers and stay idempotent.
	rs, err := w.Append(context.Background(), entries(t, "a1"))
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].AlreadyPresent || rs[0].Seq != l.acks["a1"].Seq {
		t.Fatalf("re-append of a folded id: %+v, want AlreadyPresent with seq %d", rs[0], l.acks["a1"].Seq)
	}
	l.verify(t, hs, "s")
}

// A commit never folds a generation that a merge in flight is rewriting,
// nor one whose bytes it would have to read back from the store.
func TestFoldLeavesWhatItMustNotTouch(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare returns the writer whose fourth append is checked, after
		// three appends to w.
		prepare func(t *testing.T, w *Writer) *Writer
	}{
		{"claimed by a merge", func(t *testing.T, w *Writer) *Writer {
			oldest := w.w.manifest().GetGenerations()[:1]
			if !w.w.merger.claim(oldest) {
				t.Fatal("could not claim an idle generation")
			}
			t.Cleanup(func() { w.w.merger.release(oldest) })
			return w
		}},
		{"not cached: a new epoch", func(t *testing.T, w *Writer) *Writer {
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			w2, err := Open(context.Background(), w.w.store, "s", foldOptions(t)) // its own, empty cache
			if err != nil {
				t.Fatal(err)
			}
			return w2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			w, err := Open(context.Background(), store, "s", foldOptions(t))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			l := newLedger()
			for i := range 3 {
				rs, err := w.Append(context.Background(), entries(t, fmt.Sprint("a", i)))
				if err != nil {
					t.Fatal(err)
				}
				l.add(t, rs)
			}
			w = tc.prepare(t, w)
			defer w.Abort()
			rs, err := w.Append(context.Background(), entries(t, "a3"))
			if err != nil {
				t.Fatal(err)
			}
			l.add(t, rs)
			if st := w.Stats(); st.Folds != 0 || st.Generations != 4 {
				t.Fatalf("%d folds, %d live generations; want 0, 4", st.Folds, st.Generations)
			}
			w.Abort()
			l.verify(t, store, "s")
		})
	}
}

// A fold never makes a generation larger than MaxGenerationBytes allows.
func TestFoldStaysWithinTheGenerationLimit(t *testing.T) {
	for _, tc := range []struct {
		maxGen    int64
		wantFolds int64
	}{
		{0, 1},       // the default, 16 MiB: four 1 KiB records fold
		{4 << 10, 0}, // four 1 KiB records and their framing do not fit 4 KiB
	} {
		t.Run(fmt.Sprint("max=", tc.maxGen), func(t *testing.T) {
			opts := foldOptions(t)
			opts.MaxGenerationBytes = tc.maxGen
			w, err := Open(context.Background(), memstore.New(), "s", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			for i := range 4 {
				if _, err := w.Append(context.Background(), []Entry{kib1Entry(t, fmt.Sprint("a", i))}); err != nil {
					t.Fatal(err)
				}
			}
			if st := w.Stats(); st.Folds != tc.wantFolds {
				t.Fatalf("%d folds, want %d", st.Folds, tc.wantFolds)
			}
		})
	}
}

// A commit folds only what fits beside its records as the queue counts
// them (Entry.size: data and id), so that long ids cannot make the fold's
// budget larger than the generation limit leaves.
func TestFoldBudgetCountsRecordsAsTheQueueDoes(t *testing.T) {
	store := memstore.New()
	cache := NewBlobCache(1 << 20)
	opts := foldOptions(t)
	opts.MergeRun = 2 // one generation before a commit makes a run to fold
	opts.Cache = cache
	w, err := Open(context.Background(), store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(context.Background(), entries(t, "a")); err != nil {
		t.Fatal(err)
	}
	prev := w.w.manifest().GetGenerations()[0].GetBytes()
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Records with ids longer than 16 bytes, which the fold's budget used
	// to count as 16.
	batch := make([]Entry, 4)
	var queued int64
	for i := range batch {
		batch[i] = kib1Entry(t, fmt.Sprintf("%0200d", i))
		queued += int64(len(batch[i].Data) + len(batch[i].ID))
	}
	// The batch fits; the batch and the cached generation before it do not.
	opts.MaxGenerationBytes = queued + int64(prev) - 1
	w2, err := Open(context.Background(), store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	if _, err := w2.Append(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if st := w2.Stats(); st.Folds != 0 || st.Generations != 2 {
		t.Fatalf("%d folds, %d live generations; want 0 and 2: the batch of %d bytes and the %d-byte generation exceed the %d-byte limit",
			st.Folds, st.Generations, queued, prev, opts.MaxGenerationBytes)
	}
}
