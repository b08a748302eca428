package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// holdCheckpoints holds s's manifest puts at a gate, deaf to their
// context, from now until the test fails them (not applied) with
// g.Fail(blob.ErrConditionFailed).
func holdCheckpoints(t *testing.T, s *faultstore.Store) *faultstore.Gate {
	g := s.Hold(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, Suffix: "/_manifest"}, faultstore.Deaf)
	t.Cleanup(g.Release) // if the test ended before it failed them
	return g
}

// A Close while the committer waits for checkpoint room (the 2K bound) and
// the checkpointer's last try failed: the checkpointer, closing, must keep
// checkpointing when asked while it waits for the committer, which waits
// for a checkpoint (found by an independent review: 8 of 12 runs stalled).
func TestCloseDoesNotStallAtTheLagBound(t *testing.T) {
	stalls := 0
	const runs = 12
	for range runs {
		fs := faultstore.New(memstore.New(), 1)
		ctx := context.Background()
		opts := testOptions(t)
		opts.CheckpointEvery = 1
		opts.CheckpointInterval = time.Hour
		opts.CommitTimeout = 1 * time.Second
		opts.DisableBackground = true
		w, err := Open(ctx, fs, "s", opts)
		if err != nil {
			t.Fatal(err)
		}
		g := holdCheckpoints(t, fs)
		if _, err := w.Append(ctx, entries(t, "a")); err != nil {
			t.Fatal(err)
		}
		<-g.Reached() // checkpoint through 1 is out
		if _, err := w.Append(ctx, entries(t, "b")); err != nil {
			t.Fatal(err)
		}
		cerr := make(chan error, 1)
		go func() { _, err := w.Append(ctx, entries(t, "c")); cerr <- err }()
		for w.QueuedBytes() == 0 {
			time.Sleep(time.Millisecond)
		}
		closed := make(chan error, 1)
		go func() { closed <- w.Close(ctx) }()
		for {
			w.w.mu.Lock()
			st := w.w.state
			w.w.mu.Unlock()
			if st == stateClosing {
				break
			}
			time.Sleep(time.Millisecond)
		}
		g.Fail(blob.ErrConditionFailed) // the held checkpoint fails; the store is healthy from now on
		start := time.Now()
		err = <-cerr
		if err != nil {
			stalls++
			t.Logf("append c failed after %v with a healthy store: %v", time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, blob.ErrUnavailable) {
				t.Logf("(not ErrUnavailable)")
			}
		}
		if err := <-closed; err != nil {
			t.Logf("close: %v", err)
		}
		w.Abort()
	}
	t.Logf("%d of %d runs stalled", stalls, runs)
	if stalls > 0 {
		t.Fail()
	}
}
