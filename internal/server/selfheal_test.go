package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// 64 appends queued on one writer are fenced together by another writer's
// claim. The writer is replaced once, not 64 times, and every append
// succeeds on the replacement.
func TestFenceSelfHealReopensOnce(t *testing.T) {
	mem := memstore.New()
	store := faultstore.New(mem, 1)
	opener := &countingOpen{store: store, opts: testWriterOptions(t)}
	svc := newTestService(t, store, 4, opener.open)
	ctx := context.Background()
	l := newLedger()

	first, err := svc.writers.append(ctx, "fence", entries(t, "first"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, "fence", []string{"first"}, seqsOf(first))
	h1 := heldFor(svc.writers, "fence")

	// Hold the stale writer's first commit until all 64 appends are on it.
	gate := store.Hold(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, If: func(c faultstore.Call) bool {
		return c.PutOpts.IfNoneMatch && !strings.HasSuffix(c.Name, "/manifest")
	}})
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("a%02d", i)
			results, err := svc.writers.append(ctx, "fence", entries(t, id))
			if err != nil {
				t.Errorf("append %s: %v", id, err)
				return
			}
			if results[0].Epoch == h1.w.Epoch() {
				t.Errorf("append %s acked by the fenced epoch %d", id, h1.w.Epoch())
			}
			l.add(t, "fence", []string{id}, seqsOf(results))
		})
	}
	<-gate.Reached()
	waitFor(t, func() bool {
		svc.writers.mu.Lock()
		defer svc.writers.mu.Unlock()
		return h1.pins == n
	})
	// Another writer claims the shard while all 64 wait on the stale
	// writer. It stays idle: it only fences.
	other, err := shard.Open(ctx, mem, "fence", testWriterOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Abort()
	gate.Release()
	wg.Wait()

	l.verify(t, mem)
	if got := opener.n.Load(); got != 2 {
		t.Errorf("%d opens, want 2: the first, and one replacement for 64 fenced appends", got)
	}
	if got := testutil.ToFloat64(svc.metrics.fences); got != 1 {
		t.Errorf("fences %v, want 1", got)
	}
	if got := testutil.ToFloat64(svc.metrics.selfHeals); got != n {
		t.Errorf("self-heals %v, want %d", got, n)
	}
}

// A shard that some other writer claims again after every reopen stays
// fenced: after its attempts the append fails Unavailable, naming the shard
// and both epochs and telling the client it was not stored.
func TestFenceStillFencedAfterAttempts(t *testing.T) {
	store := memstore.New()
	opts := testWriterOptions(t)
	var opens int
	var mu sync.Mutex
	open := func(ctx context.Context, shardName string) (*shard.Writer, error) {
		mu.Lock()
		opens++
		mu.Unlock()
		w, err := shard.Open(ctx, store, shardName, opts)
		if err != nil {
			return nil, err
		}
		thief, err := shard.Open(ctx, store, shardName, opts) // fences w at once
		if err != nil {
			w.Abort()
			return nil, err
		}
		thief.Abort()
		return w, nil
	}
	svc := newTestService(t, store, 4, open)
	_, err := svc.writers.append(context.Background(), "contended", entries(t, "x"))
	if !errors.Is(err, shard.ErrFenced) {
		t.Fatalf("append: %v, want ErrFenced", err)
	}
	st := appendStatus(context.Background(), err)
	msg := st.Error()
	for _, want := range []string{`"contended"`, "epoch 7", "epoch 8", "not stored, safe to retry", "Unavailable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("status %q does not mention %q", msg, want)
		}
	}
	if opens != DefaultAppendAttempts {
		t.Errorf("%d opens, want %d (one per attempt)", opens, DefaultAppendAttempts)
	}
}

func heldFor(ws *writerSet, shardName string) *held {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.byShard[shardName]
}
