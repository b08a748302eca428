package shard

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// ckptGate holds manifest puts while armed; a held put fails (not applied)
// when released.
type ckptGate struct {
	blob.Store
	armed atomic.Bool
	held  chan struct{}
	rel   chan struct{}
}

func (g *ckptGate) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	if strings.HasSuffix(name, "/_manifest") && g.armed.Load() {
		g.held <- struct{}{}
		<-g.rel
		return blob.Attrs{}, blob.ErrConditionFailed
	}
	return g.Store.Put(ctx, name, data, opts)
}

// A Close while the committer waits for checkpoint room (the 2K bound) and
// the checkpointer's last try failed: the checkpointer, closing, must keep
// checkpointing when asked while it waits for the committer, which waits
// for a checkpoint (found by an independent review: 8 of 12 runs stalled).
func TestCloseDoesNotStallAtTheLagBound(t *testing.T) {
	stalls := 0
	const runs = 12
	for range runs {
		g := &ckptGate{Store: memstore.New(), held: make(chan struct{}, 4), rel: make(chan struct{})}
		ctx := context.Background()
		opts := testOptions(t)
		opts.CheckpointEvery = 1
		opts.CheckpointInterval = time.Hour
		opts.CommitTimeout = 1 * time.Second
		opts.DisableBackground = true
		w, err := Open(ctx, g, "s", opts)
		if err != nil {
			t.Fatal(err)
		}
		g.armed.Store(true)
		if _, err := w.Append(ctx, entries(t, "a")); err != nil {
			t.Fatal(err)
		}
		<-g.held // checkpoint through 1 is out
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
		g.armed.Store(false) // the store is healthy from now on
		close(g.rel)         // the held checkpoint fails
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
