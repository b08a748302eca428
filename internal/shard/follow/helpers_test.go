package follow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// env is one process: a store that counts its calls, a resident writer
// publishing to a Notifier, a reader, and a Set.
type env struct {
	t      *testing.T
	store  *faultstore.Store
	w      *shard.Writer
	reader *shard.Reader
	set    *Set
	next   int
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	store := faultstore.New(memstore.New(), 1)
	n := shard.NewNotifier()
	w, err := shard.Open(context.Background(), store, "s", shard.Options{Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond, Notifier: n})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Abort)
	reader := shard.NewReader(store, shard.ReaderOptions{})
	opts.Notifier = n
	opts.Logger = zaptest.NewLogger(t)
	set := NewSet(reader, opts)
	t.Cleanup(set.Close)
	return &env{t: t, store: store, w: w, reader: reader, set: set}
}

// appendN appends n records in one commit and returns the last seq.
func (e *env) appendN(n int) uint64 {
	e.t.Helper()
	es := make([]shard.Entry, n)
	for i := range es {
		rec := &rolloutv1.Record{Id: fmt.Sprintf("id-%d", e.next), RolloutId: fmt.Sprintf("r-%d", e.next%3), Content: "content", Role: rolloutv1.Role(1 + e.next%2)}
		e.next++
		var err error
		if es[i], err = shard.Prepare(rec, time.Unix(1700000000, 0)); err != nil {
			e.t.Fatal(err)
		}
	}
	res, err := e.w.Append(context.Background(), es)
	if err != nil {
		e.t.Fatal(err)
	}
	return res[len(res)-1].Seq
}

// reads is how many read calls the store has served.
func (e *env) reads() int64 {
	return e.store.Calls(faultstore.OpGet) + e.store.Calls(faultstore.OpHead) + e.store.Calls(faultstore.OpList)
}

// follower is one Set.Scan running in its own goroutine, collecting what
// it delivers.
type follower struct {
	mu     sync.Mutex
	got    []*rolloutv1.Record
	cursor uint64
	moved  chan struct{}
	cancel context.CancelFunc
	done   chan error
}

func (e *env) follow(opts shard.ScanOptions, emitted func(shard.Batch)) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan error, 1), moved: make(chan struct{}, 1), cursor: opts.AfterSeq}
	go func() {
		f.done <- e.set.Scan(ctx, "s", opts, func(b shard.Batch) error {
			if emitted != nil {
				emitted(b)
			}
			f.mu.Lock()
			f.got = append(f.got, b.Records...)
			f.cursor = b.Cursor
			f.mu.Unlock()
			select {
			case f.moved <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	e.t.Cleanup(func() { f.stop(e.t) })
	return f
}

// waitFor waits until the follower's cursor reaches seq.
func (f *follower) waitFor(t *testing.T, seq uint64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		c := f.cursor
		f.mu.Unlock()
		if c >= seq {
			return
		}
		select {
		case <-f.moved:
		case <-deadline:
			t.Fatalf("follower stuck at %d, want %d", c, seq)
		}
	}
}

// stop ends the follower and checks that it ended by its context only.
func (f *follower) stop(t *testing.T) {
	f.cancel()
	if f.done == nil {
		return
	}
	if err := <-f.done; !errors.Is(err, context.Canceled) {
		t.Errorf("follower ended with %v", err)
	}
	f.done = nil
}

func (f *follower) records() []*rolloutv1.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*rolloutv1.Record(nil), f.got...)
}
