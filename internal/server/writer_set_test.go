package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// An LRU of one writer, 32 goroutines appending to 50 shards: every writer
// is evicted over and over, mostly while pinned. Nothing may fail, no
// writer may be fenced (the set never holds two writers of a shard), and
// every ack reads back exactly once.
func TestWriterSetLRUOfOneLosesNothing(t *testing.T) {
	store := memstore.New()
	opener := &countingOpen{store: store, opts: testWriterOptions(t)}
	svc := newTestService(t, store, 1, opener.open)
	l := newLedger()

	const goroutines, perGoroutine, shards = 32, 40, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				shardName := fmt.Sprintf("lru/s%02d", rand.N(shards))
				batch := ids(fmt.Sprintf("g%d-%d", g, i), 1+rand.N(3))
				results, err := svc.writers.append(context.Background(), shardName, entries(t, batch...))
				if err != nil {
					t.Errorf("append to %s: %v", shardName, err)
					return
				}
				l.add(t, shardName, batch, seqsOf(results))
			}
		})
	}
	wg.Wait()
	l.verify(t, store)

	m := svc.metrics
	t.Logf("acked %d records; %d opens, %d evictions, %d fences, %d writers held",
		l.count(), opener.n.Load(), int(testutil.ToFloat64(m.evictions)), int(testutil.ToFloat64(m.fences)), svc.writers.resident())
	if got := testutil.ToFloat64(m.fences); got != 0 {
		t.Errorf("%v writers fenced; the set must never open a second writer for a shard it holds", got)
	}
	if testutil.ToFloat64(m.evictions) == 0 {
		t.Error("no evictions: the test did not exercise the LRU")
	}
	if n := svc.writers.resident(); n != 1 {
		t.Errorf("%d writers held after every request finished, want 1 (the LRU's size)", n)
	}
}

// A writer evicted while pinned keeps working for the request that pins it,
// is handed to the next request for its shard, and is not reopened.
func TestWriterSetEvictionDeferredWhilePinned(t *testing.T) {
	store := memstore.New()
	opener := &countingOpen{store: store, opts: testWriterOptions(t)}
	ws := newTestService(t, store, 1, opener.open).writers
	ctx := context.Background()

	a, err := ws.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ws.acquire(ctx, "b") // evicts a, which is pinned
	if err != nil {
		t.Fatal(err)
	}
	if a.resident || !b.resident {
		t.Fatalf("after acquiring b: a resident %v, b resident %v", a.resident, b.resident)
	}
	if _, err := a.w.Append(ctx, entries(t, "x")); err != nil {
		t.Fatalf("append on the evicted but pinned writer: %v", err)
	}
	a2, err := ws.acquire(ctx, "a") // reuses a, evicting b
	if err != nil {
		t.Fatal(err)
	}
	if a2 != a {
		t.Fatal("a second writer was opened for shard a while the first was pinned")
	}
	if a.pins != 2 || !a.resident {
		t.Fatalf("a: pins %d resident %v, want 2 and true", a.pins, a.resident)
	}
	ws.release(b) // b's last pin: aborted now
	if _, err := b.w.Append(ctx, entries(t, "y")); !errors.Is(err, shard.ErrAborted) {
		t.Fatalf("append on b after its deferred eviction: %v, want ErrAborted", err)
	}
	ws.release(a)
	ws.release(a2)
	if _, err := a.w.Append(ctx, entries(t, "z")); err != nil {
		t.Fatalf("a is resident and unpinned and must still work: %v", err)
	}
	if n := opener.n.Load(); n != 2 {
		t.Errorf("%d opens, want 2", n)
	}
	if n := ws.resident(); n != 1 {
		t.Errorf("%d writers held, want 1", n)
	}
}

// slowOpen holds every open until released.
type slowOpen struct {
	countingOpen
	release chan struct{}
	err     error
}

func (o *slowOpen) open(ctx context.Context, shardName string) (*shard.Writer, error) {
	select {
	case <-o.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if o.err != nil {
		o.n.Add(1)
		return nil, o.err
	}
	return o.countingOpen.open(ctx, shardName)
}

// Concurrent first requests for one shard open one writer.
func TestWriterSetSingleFlightOpen(t *testing.T) {
	store := memstore.New()
	opener := &slowOpen{countingOpen: countingOpen{store: store, opts: testWriterOptions(t)}, release: make(chan struct{})}
	ws := newTestService(t, store, 4, opener.open).writers

	const n = 16
	got := make([]*held, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			h, err := ws.acquire(context.Background(), "one")
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = h
		})
	}
	waitFor(t, func() bool {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		op := ws.opening["one"]
		return op != nil && op.waiters == n
	})
	close(opener.release)
	wg.Wait()
	for _, h := range got {
		if h != got[0] {
			t.Fatal("requests got different writers")
		}
	}
	if got[0].pins != n {
		t.Errorf("pins %d, want %d", got[0].pins, n)
	}
	for _, h := range got {
		ws.release(h)
	}
	if c := opener.n.Load(); c != 1 {
		t.Errorf("%d opens, want 1", c)
	}
}

// A request that gives up while its writer opens gets ctx's error; the open
// still completes and serves the next request without another open.
func TestWriterSetAcquireCancelledDuringOpen(t *testing.T) {
	store := memstore.New()
	opener := &slowOpen{countingOpen: countingOpen{store: store, opts: testWriterOptions(t)}, release: make(chan struct{})}
	ws := newTestService(t, store, 4, opener.open).writers

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := ws.acquire(ctx, "s"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire: %v, want DeadlineExceeded", err)
	}
	close(opener.release)
	waitFor(t, func() bool { return ws.resident() == 1 })
	h, err := ws.acquire(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	if h.pins != 1 {
		t.Errorf("pins %d, want 1: the request that gave up must not keep a pin", h.pins)
	}
	ws.release(h)
	if c := opener.n.Load(); c != 1 {
		t.Errorf("%d opens, want 1", c)
	}
}

// An open that fails fails every request waiting for it; the next request
// tries again.
func TestWriterSetOpenError(t *testing.T) {
	store := memstore.New()
	boom := errors.New("boom")
	opener := &slowOpen{countingOpen: countingOpen{store: store, opts: testWriterOptions(t)}, release: make(chan struct{}), err: boom}
	ws := newTestService(t, store, 4, opener.open).writers
	close(opener.release)
	if _, err := ws.acquire(context.Background(), "s"); !errors.Is(err, boom) {
		t.Fatalf("acquire: %v, want the open's error", err)
	}
	opener.err = nil
	h, err := ws.acquire(context.Background(), "s")
	if err != nil {
		t.Fatalf("acquire after a failed open: %v", err)
	}
	ws.release(h)
}

// retire replaces a writer once, however many requests report it failed.
func TestWriterSetRetireOnce(t *testing.T) {
	store := memstore.New()
	opener := &countingOpen{store: store, opts: testWriterOptions(t)}
	ws := newTestService(t, store, 4, opener.open).writers
	ctx := context.Background()
	h1, err := ws.acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := ws.acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	cause := &shard.FencedError{Shard: "s", Local: 1, Stored: 2}
	if !ws.retire(h1, cause) {
		t.Fatal("first retire did not retire")
	}
	if ws.retire(h2, cause) {
		t.Fatal("second retire of the same writer retired it again")
	}
	n, err := ws.acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if n == h1 {
		t.Fatal("a retired writer was handed out again")
	}
	ws.release(h1)
	ws.release(h2) // the retired writer's last pin: aborted now
	if _, err := h1.w.Append(ctx, entries(t, "a")); !errors.Is(err, shard.ErrAborted) {
		t.Fatalf("append on a retired writer after its last unpin: %v, want ErrAborted", err)
	}
	ws.release(n)
	if c := opener.n.Load(); c != 2 {
		t.Errorf("%d opens, want 2", c)
	}
}

// closeAll closes every writer gracefully; later requests are refused.
func TestWriterSetCloseAll(t *testing.T) {
	store := memstore.New()
	opener := &countingOpen{store: store, opts: testWriterOptions(t)}
	ws := newWriterSet(8, opener.open, time.Second, appendRetry{DefaultAppendAttempts, time.Millisecond}, zaptest.NewLogger(t), NewMetrics())
	ctx := context.Background()
	for i := range 5 {
		h, err := ws.acquire(ctx, fmt.Sprintf("s%d", i))
		if err != nil {
			t.Fatal(err)
		}
		ws.release(h)
	}
	closed, failed := ws.closeAll(ctx)
	if closed != 5 || failed != 0 {
		t.Errorf("closeAll: %d closed, %d failed; want 5, 0", closed, failed)
	}
	if _, err := ws.acquire(ctx, "s0"); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("acquire after closeAll: %v, want ErrShuttingDown", err)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A request waiting for a writer to open when shutdown begins is told the
// server is shutting down (Unavailable, retry elsewhere), not Canceled.
func TestWriterSetCloseAllDuringOpen(t *testing.T) {
	store := memstore.New()
	opener := &slowOpen{countingOpen: countingOpen{store: store, opts: testWriterOptions(t)}, release: make(chan struct{})}
	ws := newWriterSet(4, opener.open, 10*time.Second, appendRetry{DefaultAppendAttempts, time.Millisecond}, zaptest.NewLogger(t), NewMetrics())
	errc := make(chan error, 1)
	go func() {
		_, err := ws.acquire(context.Background(), "s")
		errc <- err
	}()
	waitFor(t, func() bool {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		op := ws.opening["s"]
		return op != nil && op.waiters == 1
	})
	ws.closeAll(context.Background())
	if err := <-errc; !errors.Is(err, ErrShuttingDown) {
		t.Errorf("acquire during closeAll: %v, want ErrShuttingDown", err)
	}
}
