package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

func TestBatchGet(t *testing.T) {
	ctx := context.Background()
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.DisableBackground = true // many generations
	w, err := Open(ctx, fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	const gens, per = 40, 50
	var all []string
	for g := range gens {
		batch := ids(fmt.Sprintf("g%02d", g), per)
		appendIDs(t, w, batch...)
		all = append(all, batch...)
	}
	r := NewReader(fs, ReaderOptions{})
	check := func(t *testing.T, req []string, res []BatchResult) {
		t.Helper()
		if len(res) != len(req) {
			t.Fatalf("%d results for %d ids", len(res), len(req))
		}
		for i, id := range req {
			switch {
			case res[i].OverLimit:
			case res[i].NotFound:
				if id[0] == 'g' {
					t.Errorf("result %d (%q): not found, but stored", i, id)
				}
			case res[i].Record == nil:
				t.Errorf("result %d (%q): empty", i, id)
			default:
				want := record(id)
				want.Seq, want.CreatedAt = res[i].Record.GetSeq(), res[i].Record.GetCreatedAt()
				if !proto.Equal(res[i].Record, want) || id[0] != 'g' {
					t.Errorf("result %d (%q) = %v", i, id, res[i].Record)
				}
			}
		}
	}

	t.Run("duplicates and missing", func(t *testing.T) {
		req := []string{"g03-7", "missing", "g03-7", "g39-49", "nope", "g00-0", "g03-7"}
		res, err := r.BatchGet(ctx, "s", req, BatchGetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, req, res)
		for _, i := range []int{1, 4} {
			if !res[i].NotFound {
				t.Errorf("result %d: %+v, want not found", i, res[i])
			}
		}
		if res[0].Record == nil || res[0].Record != res[2].Record || res[6].Record != res[0].Record {
			t.Error("a repeated id did not get its record each time")
		}
	})

	t.Run("1000 ids across every generation, one manifest read", func(t *testing.T) {
		req := append([]string(nil), all[:1000]...)
		for i := range req {
			req[i] = all[(i*7)%len(all)]
		}
		fs.ResetCounts()
		res, err := r.BatchGet(ctx, "s", req, BatchGetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, req, res)
		for i := range res {
			if res[i].Record == nil {
				t.Fatalf("result %d: %+v, want the record", i, res[i])
			}
		}
		// One manifest GET, and per generation at most one ranged GET
		// (its records lie close together), besides cached footers.
		if gets := fs.Calls(faultstore.OpGet); gets > 1+gens+2*gens {
			t.Errorf("%d GETs for 1000 ids over %d generations; coalescing is not working", gets, gens)
		}
	})

	t.Run("byte cap", func(t *testing.T) {
		one := proto.Size(record("g00-0")) + 8 // stored with its seq and created_at
		req := []string{"g01-1", "missing", "g02-2", "g03-3", "g04-4", "g01-1"}
		res, err := r.BatchGet(ctx, "s", req, BatchGetOptions{MaxBytes: 2*one + one/2})
		if err != nil {
			t.Fatal(err)
		}
		check(t, req, res)
		want := []string{"record", "not found", "record", "over", "over", "record"}
		for i, w := range want {
			got := "record"
			switch {
			case res[i].OverLimit:
				got = "over"
			case res[i].NotFound:
				got = "not found"
			}
			if got != w {
				t.Errorf("result %d (%q) = %s, want %s", i, req[i], got, w)
			}
		}
		// The first record is returned whatever its size.
		res, err = r.BatchGet(ctx, "s", []string{"g05-5", "g05-6"}, BatchGetOptions{MaxBytes: 1})
		if err != nil || res[0].Record == nil || !res[1].OverLimit {
			t.Fatalf("BatchGet under a 1-byte cap = %+v, %v: want the first record and the second over", res, err)
		}
	})

	t.Run("projection", func(t *testing.T) {
		res, err := r.BatchGet(ctx, "s", []string{"g07-1"}, BatchGetOptions{Project: func(rec *rolloutv1.Record) { rec.Content = "" }})
		if err != nil || res[0].Record.GetContent() != "" || res[0].Record.GetRolloutId() == "" {
			t.Fatalf("projected BatchGet = %v, %v", res, err)
		}
	})
}

// A reader on the writer's own instance shares the writer's cache, which
// still holds the index of a log batch that a merge retired and GC
// collected. When a late fence lands in that position and the reader's
// view still lists the batch, the put id checks out against the cached
// footer and the ranged read returns the fence's bytes. Every read must
// take those for a replaced batch and read the view again, as Get always
// did, never answer ErrCorrupt (DATA_LOSS) for a healthy shard.
func TestReadsTellALateFenceFromACachedBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func(ctx context.Context, r *Reader) (uint64, error)
	}{
		{"Get", func(ctx context.Context, r *Reader) (uint64, error) {
			rec, err := r.Get(ctx, "s", "x")
			return rec.GetSeq(), err
		}},
		{"BatchGet", func(ctx context.Context, r *Reader) (uint64, error) {
			res, err := r.BatchGet(ctx, "s", []string{"x"}, BatchGetOptions{})
			if err != nil {
				return 0, err
			}
			return res[0].Record.GetSeq(), nil
		}},
		{"Scan", func(ctx context.Context, r *Reader) (uint64, error) {
			var seq uint64
			err := r.Scan(ctx, "s", ScanOptions{Limit: 1}, func(b Batch) error {
				if len(b.Records) > 0 {
					seq = b.Records[0].GetSeq()
				}
				return nil
			})
			return seq, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, cache, old, seq := lateFenceAfterCollect(t)
			// Both manifest reads of the view (the first and the
			// confirming one) return the manifest that lists the batch.
			r := NewReader(staleManifests(store, old, 2), ReaderOptions{Cache: cache})
			got, err := tc.read(context.Background(), r)
			if err != nil || got != seq {
				t.Fatalf("%s(x) with a late fence where its cached batch was: seq %d, %v; want seq %d", tc.name, got, err, seq)
			}
		})
	}
}

// lateFenceAfterCollect commits x at log position 1 of shard s, lets a
// merge retire it and GC collect it, and creates a late fence there. It
// returns the writer's cache, which holds position 1's batch index, a
// manifest that still lists that batch, and x's seq.
func lateFenceAfterCollect(t *testing.T) (blob.Store, *BlobCache, []byte, uint64) {
	t.Helper()
	store := memstore.New()
	ctx := context.Background()
	opts := collectingOptions(t)
	opts.Cache = NewBlobCache(DefaultCacheBytes)
	w, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Abort)
	rs, err := w.Append(ctx, entries(t, "x"))
	if err != nil {
		t.Fatal(err)
	}
	var old []byte
	waitFor(t, "a checkpoint that lists position 1", func() bool {
		b, _, err := store.Get(ctx, format.ManifestName("s"), blob.GetOptions{})
		m, derr := format.DecodeManifest(b)
		if err != nil || derr != nil || len(m.GetGenerations()) == 0 || m.GetGenerations()[0].GetPosition() != 1 {
			return false
		}
		old = b
		return true
	})
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		if _, err := w.Append(ctx, entries(t, fmt.Sprint("y", i))); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Head(ctx, format.LogName("s", 1)); errors.Is(err, blob.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GC never collected log position 1")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fence, err := format.EncodeFence(format.LogEntry{Shard: "s", Epoch: 7, Position: 1, Writer: "late", PutID: "late-1", NextSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, format.LogName("s", 1), fence.Data, blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	return store, opts.Cache, old, rs[0].Seq
}
