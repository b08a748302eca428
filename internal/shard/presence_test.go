package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// The batches a writer committed itself are looked up from memory
// (presence.go): the answer must be the one the stored view gives, through
// the filters, however merges and checkpoints changed the view since. With
// a cap of 5 ids, most batches are not remembered and take the filters'
// path. Merges fold the remembered batches throughout, so an answer that
// outlived its batch names the batch, not the merged generation.
func TestPresenceFromMemoryFollowsTheView(t *testing.T) {
	for _, maxIDs := range []int{maxOwnIDs, 5} {
		t.Run(fmt.Sprint("max-ids-", maxIDs), func(t *testing.T) {
			store := memstore.New()
			ctx := context.Background()
			first := map[string]Result{}
			// A previous writer's batches, which the writer inherits and
			// looks up through their filters.
			prev := open(t, store, "s")
			for round := range 4 {
				rs, err := prev.Append(ctx, entries(t, ids(fmt.Sprint("old", round), 3)...))
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					first[r.ID] = r
				}
			}
			prev.Abort() // no checkpoint: the batches stay in the log, after the checkpoint
			w, err := Open(ctx, store, "s", mergeOptions(t))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			w.w.mu.Lock()
			w.w.written.maxIDs = maxIDs
			w.w.mu.Unlock()
			fromMerged := reappendRounds(t, w, store, "old", first, func() {})
			if fromMerged == 0 {
				t.Fatalf("no re-append was answered from a merged generation (%d merges): the test did not cover a merge", w.Stats().Merges)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// A reopened writer remembers nothing, and inherits everything.
			w2 := open(t, store, "s")
			rs, err := w2.Append(ctx, entries(t, ids("r0", 3)...))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if !r.AlreadyPresent || r.Seq != first[r.ID].Seq {
					t.Fatalf("after reopen, re-append of %s = %+v, want already present as seq %d", r.ID, r, first[r.ID].Seq)
				}
			}
		})
	}
}

// reappendRounds appends 3 new ids a round; then, after between, appends
// again, as retries would, the ids of this round, of an earlier one and
// of an inherited batch (named old0 to old3), checking every answer
// (checkReappend). Merges run beside the appends: it goes on until answers
// came from merged generations too, and returns how many did.
func reappendRounds(t *testing.T, w *Writer, store blob.Store, old string, first map[string]Result, between func()) (fromMerged int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; round < 60 || (fromMerged < 10 && time.Now().Before(deadline)); round++ {
		rs, err := w.Append(context.Background(), entries(t, ids(fmt.Sprint("r", round), 3)...))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			first[r.ID] = r
		}
		between()
		again := append(ids(fmt.Sprint("r", round/2), 3), ids(fmt.Sprint("r", round), 3)...)
		again = append(again, ids(fmt.Sprint(old, round%4), 3)...)
		fromMerged += checkReappend(t, w, store, again, first)
	}
	return fromMerged
}

// checkReappend appends again, as a retry would, ids that were all
// committed (first holds their results), and checks every answer against
// the stored view's, looked up through the filters. It returns how many
// answers named a generation other than the one the id was committed to.
func checkReappend(t *testing.T, w *Writer, store blob.Store, again []string, first map[string]Result) (moved int) {
	t.Helper()
	ctx := context.Background()
	for try := 0; ; try++ {
		before := w.w.manifest()
		rs, err := w.Append(ctx, entries(t, again...))
		if err != nil {
			t.Fatal(err)
		}
		view := w.w.manifest()
		for _, r := range rs {
			if want := first[r.ID]; !r.AlreadyPresent || r.Seq != want.Seq {
				t.Fatalf("re-append of %s = %+v, want already present as seq %d", r.ID, r, want.Seq)
			}
		}
		if view != before {
			// A checkpoint landed meanwhile: the answers may be of either
			// view. Ask again.
			if try > 100 {
				t.Fatal("the view kept changing")
			}
			time.Sleep(time.Millisecond)
			continue
		}
		truth := map[string]shardlog.Found{}
		if err := shardlog.NewSource(store, w.w.opts.Cache, "s").LookupCommitted(ctx, view.GetGenerations(), again, truth); err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			f, ok := truth[r.ID]
			if !ok {
				t.Fatalf("%s is not in the view's generations", r.ID)
			}
			if r.Epoch != f.Gen.GetEpoch() || r.Generation != genNumber(f.Gen) || r.Seq != f.Entry.GetSeq() {
				t.Fatalf("re-append of %s = %+v; the view holds it in generation %d of epoch %d, as seq %d", r.ID, r, genNumber(f.Gen), f.Gen.GetEpoch(), f.Entry.GetSeq())
			}
			if r.Generation != first[r.ID].Generation {
				moved++
			}
		}
		return moved
	}
}

// A writer keeps the filters of the generations it inherited once it read
// them (filtered.go), up to its bound: with the shared cache emptied before
// each, appends of new ids read no filter; with no room to keep them, they
// read them again.
func TestAppendKeepsTheFiltersItRead(t *testing.T) {
	for _, pinMax := range []int64{maxPinnedFilterBytes, 0} {
		t.Run(fmt.Sprint("pin-max-", pinMax), func(t *testing.T) {
			fs := faultstore.New(memstore.New(), 1)
			ctx := context.Background()
			prev := open(t, fs, "s")
			for round := range 8 {
				if _, err := prev.Append(ctx, entries(t, ids(fmt.Sprint("old", round), 3)...)); err != nil {
					t.Fatal(err)
				}
			}
			if err := prev.Close(ctx); err != nil {
				t.Fatal(err)
			}
			opts := testOptions(t)
			opts.DisableBackground = true // merges read their sources
			w, err := Open(ctx, fs, "s", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			w.w.mu.Lock()
			w.w.pinMax = pinMax
			w.w.mu.Unlock()
			if _, err := w.Append(ctx, entries(t, "first")); err != nil {
				t.Fatal(err)
			}
			fs.ResetCounts()
			for i := range 10 {
				w.w.opts.Cache.Purge() // as other shards' blobs would push them out
				if _, err := w.Append(ctx, entries(t, fmt.Sprint("new", i))); err != nil {
					t.Fatal(err)
				}
			}
			w.w.mu.Lock()
			pinned := w.w.pinned
			w.w.mu.Unlock()
			// Each append tests its id against the 8 inherited filters;
			// one that a filter fails to rule out (1%) reads an index.
			gets := fs.Calls(faultstore.OpGet)
			switch {
			case pinned > pinMax:
				t.Fatalf("the writer keeps %d bytes of filters, over its bound of %d", pinned, pinMax)
			case pinMax > 0 && (gets >= 10 || pinned == 0):
				t.Fatalf("10 appends of new ids after the cache was emptied made %d gets (%d bytes of filters kept); want at most a few index reads", gets, pinned)
			case pinMax == 0 && gets < 80:
				t.Fatalf("with no room to keep filters, 10 appends made %d gets, want the 8 filters read by each: the test reads nothing", gets)
			}
		})
	}
}

// A merge takes the sources the cache holds as this process wrote or
// verified them (cachedSource): it parses and checks their bytes no
// more. The test spoils each batch's id filter in the cached bytes,
// which a merge that decoded its sources again would find corrupt; the
// merged records, which lie before the filter, are read back intact.
func TestMergeTakesCachedSourcesAsWritten(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	opts := mergeOptions(t)
	opts.DisableBackground = true
	w, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	l := newLedger()
	for round := range 8 {
		rs, err := w.Append(ctx, entries(t, ids(fmt.Sprint("r", round), 3)...))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
	}
	plan := w.w.manifest().GetGenerations()
	for _, g := range plan {
		data, ok := w.w.opts.Cache.GetData(shardlog.RefOf("s", g))
		if !ok {
			t.Fatalf("batch %d is not cached", g.GetPosition())
		}
		data[g.GetFooterOffset()-1] ^= 0xff // the filter's last byte
	}
	if !w.w.claims.claimLive(plan, w.w.manifest) {
		t.Fatal("claim the batches")
	}
	err = w.w.merger.merge(ctx, plan)
	w.w.merger.release(plan)
	if err != nil {
		t.Fatalf("merge of cached sources: %v", err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l.verify(t, store, "s")
}
