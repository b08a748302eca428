package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// A v2 delete whose tombstone landed with its answer lost is decided by
// the manifest read after it, even when a writer has claimed the next
// incarnation and committed in between (the fenced writer's replacement,
// healing itself): the delete answers its own deletion, once, and the
// purge of what it deleted still happens. With an expected last seq, the
// record appended since must not turn the answer into SEQ_MISMATCH
// ("nothing deleted"); without one, the delete must not go on to delete
// the next incarnation as well.
func TestDeleteV2LostTombstoneAnswerThenRecreated(t *testing.T) {
	for _, conditional := range []bool{true, false} {
		name := "unconditional"
		if conditional {
			name = "expected_last_seq"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			fs := faultstore.New(memstore.New(), 1)
			w1 := open(t, fs, "s")
			appendIDs(t, w1, "a")
			if err := w1.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The delete's claim goes through; its tombstone lands and
			// the answer is lost.
			fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName("s"),
				Fault: faultstore.LoseResponse, Skip: 1, Count: 1})
			var (
				once sync.Once
				w2   *Writer
			)
			fs.SetHooks(faultstore.Hooks{After: func(c faultstore.Call) {
				if c.Fault != faultstore.LoseResponse {
					return
				}
				once.Do(func() {
					// Before the deleter reads again, a writer claims the
					// next incarnation and commits.
					var err error
					if w2, err = Open(ctx, fs.Inner(), "s", testOptions(t)); err != nil {
						t.Errorf("Open after the tombstone: %v", err)
						return
					}
					t.Cleanup(w2.Abort)
					if _, err := w2.Append(ctx, entries(t, "b")); err != nil {
						t.Errorf("Append in the next incarnation: %v", err)
					}
				})
			}})
			opts := DeleteOptions{RetryBackoff: time.Millisecond}
			if conditional {
				last := uint64(1)
				opts.ExpectedLastSeq = &last
			}
			d, err := Delete(ctx, fs, "s", opts)
			fs.SetHooks(faultstore.Hooks{})
			if w2 == nil {
				t.Fatal("the tombstone's lost answer was never injected")
			}
			if err != nil || d.AlreadyDeleted || d.LastSeq != 1 || d.Records != 1 || d.Incarnation != 1 {
				t.Fatalf("Delete = %+v, %v: want this call's deletion of incarnation 0 (last seq 1, 1 record)", d, err)
			}

			if _, err := Purge(ctx, fs, "s", d.ThroughEpoch, nil); err != nil {
				t.Fatal(err)
			}
			if left := logBatchesThrough(t, fs, "s", d.ThroughEpoch); left != 0 {
				t.Errorf("%d log batches of the deleted incarnation left after the purge", left)
			}
			r := NewReader(fs, ReaderOptions{})
			if got, err := r.Get(ctx, "s", "b"); err != nil || got.GetSeq() != 2 {
				t.Errorf("Get(b), appended after the delete = %v, %v: want seq 2", got, err)
			}
			if _, err := r.Get(ctx, "s", "a"); !errors.Is(err, ErrRecordNotFound) {
				t.Errorf("Get(a), deleted = %v, want ErrRecordNotFound", err)
			}
			info, err := r.Describe(ctx, "s")
			if err != nil || info.Incarnation != 1 || info.Records != 1 {
				t.Errorf("Describe = %+v, %v: want incarnation 1 holding b alone", info, err)
			}
		})
	}
}

// logBatchesThrough counts the shard's log batches (fences aside) written
// under an epoch at or below through.
func logBatchesThrough(t *testing.T, store blob.Store, shard string, through uint64) int {
	t.Helper()
	ctx := context.Background()
	page, err := store.List(ctx, blob.ListOptions{Prefix: format.LogPrefix(shard)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, it := range page.Items {
		p, ok := format.ParseLogName(shard, it.Name)
		if !ok {
			continue
		}
		e, err := shardlog.NewSource(store, NewBlobCache(1<<20), shard).Entry(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !e.Fence() && e.Epoch <= through {
			n++
		}
	}
	return n
}

// An undecided tombstone is decided by the deleted_through_epoch of the
// manifest read after it: its own epoch means it landed, a lower one that
// it did not, and a higher one (a later delete replaced it) leaves it
// unknown, never success.
func TestUnclearTombstoneDecide(t *testing.T) {
	sent := &storagepb.Manifest{Epoch: 7, DeletedThroughEpoch: 7, Incarnation: 2}
	for _, tc := range []struct {
		through uint64
		landed  bool
		unknown bool
	}{
		{through: 7, landed: true},
		{through: 3},
		{through: 0},
		{through: 9, unknown: true},
	} {
		u := unclearTombstone{m: sent}
		mine, err := u.decide("s", &storagepb.Manifest{Epoch: 12, DeletedThroughEpoch: tc.through})
		if (mine != nil) != tc.landed || errors.Is(err, ErrOutcomeUnknown) != tc.unknown || (err != nil) != tc.unknown {
			t.Errorf("through %d: decide = %v, %v; want landed %v, unknown %v", tc.through, mine, err, tc.landed, tc.unknown)
		}
		if !tc.landed && !tc.unknown && u.m != nil {
			t.Errorf("through %d: a tombstone shown not to have landed is still undecided", tc.through)
		}
	}
	var none unclearTombstone
	if mine, err := none.decide("s", &storagepb.Manifest{DeletedThroughEpoch: 9}); mine != nil || err != nil {
		t.Errorf("decide with no tombstone sent = %v, %v", mine, err)
	}
	if err := (&unclearTombstone{m: sent}).wrap(context.DeadlineExceeded); !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wrap while undecided = %v, want outcome unknown and the cause", err)
	}
}
