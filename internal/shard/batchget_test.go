package shard

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
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
