package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

func exists(t *testing.T, s blob.Store, name string) bool {
	t.Helper()
	_, err := s.Head(context.Background(), name)
	if err != nil && !errors.Is(err, blob.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// waitFor polls cond; the writer's goroutines act on their own schedule.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGCDeletesOnlyUnreferencedBlobsPastGrace(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	fake := clock.NewFake(time.Unix(1_700_000_000, 0))
	opts := testOptions(t)
	opts.Clock = fake
	opts.MergeRun = 4
	opts.MergeInterval = time.Second
	opts.RetireGrace = time.Minute
	opts.OrphanScanInterval = time.Hour

	// Epoch 1 leaves an orphan: a generation it wrote but never committed.
	w1, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	orphan := format.GenerationName("s", w1.Epoch(), 999)
	if _, err := store.Put(ctx, orphan, []byte("never committed"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	w1.Abort()

	w, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	// The current epoch's own uncommitted blob may be in flight: never an orphan.
	inflight := format.GenerationName("s", w.Epoch(), 998)
	if _, err := store.Put(ctx, inflight, []byte("in flight"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	l := newLedger()
	for i := range 4 {
		rs, err := w.Append(ctx, entries(t, ids(string(rune('a'+i)), 2)...))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
	}
	// The merge's edit waits EditDelay (fake time) for an append to ride on.
	waitFor(t, "a merge", func() bool {
		fake.Advance(100 * time.Millisecond)
		return w.Stats().Merges >= 1
	})
	m := w.w.manifest()
	if n := retiredCount(m); n != 4 {
		t.Fatalf("%d retired generations after merging 4", n)
	}
	var retired []string
	eachRetired(m, func(k format.GenKey, _ int64) bool {
		retired = append(retired, k.Blob("s")) // log positions, on v2: as GC names them
		return true
	})
	// Within the grace period nothing is deleted, however often GC runs.
	for range 5 {
		fake.Advance(10 * time.Second)
		time.Sleep(5 * time.Millisecond)
	}
	for _, name := range retired {
		if !exists(t, store, name) {
			t.Fatalf("retired %s deleted within the grace period", name)
		}
	}
	l.verify(t, store, "s")
	// Past the grace period the retired blobs go, and the manifest forgets them.
	fake.Advance(20 * time.Second)
	waitFor(t, "retired generations to be deleted and forgotten", func() bool {
		fake.Advance(time.Second)
		return retiredCount(w.w.manifest()) == 0
	})
	for _, name := range retired {
		if exists(t, store, name) {
			t.Fatalf("retired %s survived GC past its grace period", name)
		}
	}
	// The orphan scan runs one MergeInterval after Open.
	if exists(t, store, orphan) {
		t.Fatal("orphan of epoch 1 was not deleted")
	}
	if !exists(t, store, inflight) {
		t.Fatal("an unreferenced generation of the current epoch was deleted")
	}
	l.verify(t, store, "s")
}

func TestGCParallelismKeepsUpWithOneDeleteWhenItCan(t *testing.T) {
	const interval = 5 * time.Second
	for _, tc := range []struct {
		due     int
		latency time.Duration
		want    int
	}{
		{0, time.Millisecond, 1},
		{100, 0, 1},                      // nothing measured yet
		{1500, time.Millisecond, 1},      // a lone client on Azurite: 1.5 s of 2.5
		{2500, time.Millisecond, 1},      // exactly the budget
		{2501, time.Millisecond, 2},      // just over it
		{1000, 10 * time.Millisecond, 4}, // Azure-like latency, 10 s of work
		{100000, 10 * time.Millisecond, gcDeleteParallelism},
	} {
		if got := parallelism(tc.due, tc.latency, interval); got != tc.want {
			t.Errorf("parallelism(%d due, %v per delete, %v) = %d, want %d", tc.due, tc.latency, interval, got, tc.want)
		}
	}
}

// slowDeletes returns a store whose every delete takes delay first, and a
// func telling how many deletes were ever in flight at once.
func slowDeletes(inner blob.Store, delay time.Duration) (*faultstore.Store, func() int) {
	s := faultstore.New(inner, 1)
	var mu sync.Mutex
	inFlight, maxFlight := 0, 0
	s.Intercept(faultstore.Match{Ops: []faultstore.Op{faultstore.OpDelete}}, func(context.Context, faultstore.Call) error {
		mu.Lock()
		inFlight++
		maxFlight = max(maxFlight, inFlight)
		mu.Unlock()
		time.Sleep(delay)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	})
	return s, func() int {
		mu.Lock()
		defer mu.Unlock()
		return maxFlight
	}
}

// GC deletes one at a time while that finishes within half an interval,
// and in parallel once it would not.
func TestGCDeletesInParallelOnlyWhenOneAtATimeFallsBehind(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		parallel bool
	}{
		{"keeps up alone", time.Second, false},
		{"falls behind", 5 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, maxFlight := slowDeletes(memstore.New(), 2*time.Millisecond)
			w := appendSixtyToRetire(t, store, tc.interval)
			// Every batch: under protocol v2 the first merge retires 32 at
			// once, which the first pass deletes before any delete was
			// timed, hence one at a time; the pace shows in the next pass.
			waitFor(t, "GC to delete 60 retired generations", func() bool { return w.Stats().GCDeletedBlobs >= 60 })
			got := maxFlight()
			if tc.parallel && got < 2 || !tc.parallel && got != 1 {
				t.Fatalf("at most %d deletes in flight; want parallel=%v", got, tc.parallel)
			}
		})
	}
}

// manyDeletes is a memstore with DeleteMany, as the local store has it,
// counting the deletes each way and the largest DeleteMany.
type manyDeletes struct {
	*memstore.Store
	mu              sync.Mutex
	alone, together int
	largest         int
}

func (m *manyDeletes) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	m.mu.Lock()
	m.alone++
	m.mu.Unlock()
	return m.Store.Delete(ctx, name, opts)
}

func (m *manyDeletes) DeleteMany(ctx context.Context, names []string) []error {
	m.mu.Lock()
	m.together += len(names)
	m.largest = max(m.largest, len(names))
	m.mu.Unlock()
	errs := make([]error, len(names))
	for i, n := range names {
		errs[i] = m.Store.Delete(ctx, n, blob.DeleteOptions{})
	}
	return errs
}

// On a store whose deletes cost less issued together (the local store,
// whose removals in one directory share one fsync), a pass issues its
// deletes in one call, whatever the pace one at a time would keep.
func TestGCDeletesTogetherWhereTheStoreGroupsThem(t *testing.T) {
	store := &manyDeletes{Store: memstore.New()}
	w := appendSixtyToRetire(t, store, time.Second) // one at a time would keep up
	waitFor(t, "GC to delete 60 retired generations", func() bool { return w.Stats().GCDeletedBlobs >= 60 })
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.alone != 0 || store.largest < 32 {
		t.Fatalf("GC deleted %d alone, %d together (at most %d in one call); want all together, the first merge's 32 in one call",
			store.alone, store.together, store.largest)
	}
}

// appendSixtyToRetire opens shard "s" on store, merging every interval
// and deleting what merges retire 100 ms later, and appends 60 batches,
// which merges then retire. The writer is aborted when the test ends.
func appendSixtyToRetire(t *testing.T, store blob.Store, interval time.Duration) *Writer {
	t.Helper()
	opts := mergeOptions(t)
	opts.MergeInterval = interval
	opts.RetireGrace = 100 * time.Millisecond
	w, err := Open(context.Background(), store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Abort)
	for i := range 60 {
		if _, err := w.Append(context.Background(), entries(t, fmt.Sprint("a", i))); err != nil {
			t.Fatal(err)
		}
	}
	return w
}
