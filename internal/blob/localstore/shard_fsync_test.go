package localstore

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// TestShardNeverAcksACommitWhoseFsyncFailed runs the shard layer over a
// store whose directory fsync fails after a commit's blob became visible.
// The shard layer acknowledges a commit it reads back from the store, so
// the append must not succeed; nor may its retry or any later append, until
// the store is reopened (a restart).
func TestShardNeverAcksACommitWhoseFsyncFailed(t *testing.T) {
	const shardName = "exp/rollout-1"
	for _, tc := range []struct {
		name string
		dir  func(s *Store) (string, error) // whose fsync fails
	}{
		// The ack follows one create in the log.
		{"v2 log", func(s *Store) (string, error) {
			p, err := s.blobPath(format.LogName(shardName, 2))
			return filepath.Dir(p), err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, f := openFaulty(t, dir)
			ctx := t.Context()
			opts := shard.Options{Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond, DisableMerge: true}
			w, err := shard.Open(ctx, s, shardName, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Abort)
			if _, err := w.Append(ctx, prepare(t, "r1")); err != nil {
				t.Fatalf("first Append: %v", err)
			}

			failDir, err := tc.dir(s)
			if err != nil {
				t.Fatal(err)
			}
			f.arm(dirIs(failDir))
			r2 := prepare(t, "r2")
			res, err := w.Append(ctx, r2)
			if f.hits.Load() == 0 {
				t.Fatalf("the fault never fired (Append returned %v, %v)", res, err)
			}
			f.disarm()
			wantUnacked(t, "the append whose commit's fsync failed", res, err)
			res, err = w.Append(ctx, r2)
			wantUnacked(t, "its retry", res, err)
			res, err = w.Append(ctx, prepare(t, "r3"))
			wantUnacked(t, "a later append", res, err)
			if w2, err := shard.Open(ctx, s, shardName, opts); err == nil {
				w2.Abort()
				t.Fatal("a new writer opened on the failed store")
			}
			r := shard.NewReader(s, shard.ReaderOptions{})
			if rec, err := r.Get(ctx, shardName, "r2"); err == nil {
				t.Fatalf("Reader.Get of the unacknowledged record = %v, want an error", rec)
			}

			// After a restart the retry resolves the outcome.
			w.Abort()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, _ := openFaulty(t, dir)
			w3, err := shard.Open(ctx, s2, shardName, opts)
			if err != nil {
				t.Fatalf("Open after the restart: %v", err)
			}
			t.Cleanup(w3.Abort)
			if _, err := w3.Append(ctx, r2); err != nil {
				t.Fatalf("retry after the restart: %v", err)
			}
			if err := w3.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func prepare(t *testing.T, id string) []shard.Entry {
	t.Helper()
	e, err := shard.Prepare(&rolloutv1.Record{Id: id, RolloutId: "rollout-1", Content: "content of " + id}, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	return []shard.Entry{e}
}

// wantUnacked fails the test unless an append failed with an error that
// says its outcome is unknown or the store failed.
func wantUnacked(t *testing.T, what string, res []shard.Result, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded (%+v) though its commit may not survive a crash", what, res)
	}
	if !errors.Is(err, shard.ErrOutcomeUnknown) && !errors.Is(err, blob.ErrStoreFailed) {
		t.Fatalf("%s: %v, want shard.ErrOutcomeUnknown or blob.ErrStoreFailed", what, err)
	}
	t.Logf("%s: %v", what, err)
}
