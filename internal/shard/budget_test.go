package shard

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// budgetOptions are testOptions sharing b.
func budgetOptions(t testing.TB, b *PresenceBudget) Options {
	o := testOptions(t)
	o.Presence = b
	return o
}

// inherit leaves rounds batches of 3 ids on shard in the log, after its
// checkpoint, for the next writer to inherit and look up through their
// filters.
func inherit(t *testing.T, store blob.Store, shard string, rounds int) map[string]Result {
	t.Helper()
	first := map[string]Result{}
	prev := open(t, store, shard)
	for round := range rounds {
		rs, err := prev.Append(context.Background(), entries(t, ids(fmt.Sprint(shard, "-old", round), 3)...))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			first[r.ID] = r
		}
	}
	prev.Abort() // no checkpoint: the batches stay in the log
	return first
}

// heldBytes recounts, from the writer's state, the bytes its presence
// state keeps: what the budget must have been charged at least.
func heldBytes(w *writer) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, b := range w.written.batches {
		n += batchBytes(b.entries)
	}
	for _, fg := range w.filtered {
		if f := fg.filter.Load(); f != nil {
			n += filterBytes(f)
		}
	}
	return n
}

// Many writers, appending at once under a budget far below what they
// would keep: the bytes charged never exceed the budget, and neither do
// the bytes the writers' state holds, recounted from it. The slack is the
// estimate's own (ownEntryBytes, filterBytes), and a filter that an append
// read for a list a checkpoint replaced meanwhile, charged until the next
// checkpoint recounts.
func TestPresenceBudgetBoundsManyWriters(t *testing.T) {
	const writers, rounds, budget = 24, 12, 24 << 10
	store := memstore.New()
	ctx := context.Background()
	b := NewPresenceBudget(budget)
	ws := make([]*Writer, writers)
	for i := range ws {
		shard := fmt.Sprint("s", i)
		if i%2 == 0 {
			inherit(t, store, shard, 4) // filters to keep, beside own batches
		}
		w, err := Open(ctx, store, shard, budgetOptions(t, b))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Abort)
		ws[i] = w
	}
	var over atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			if n := b.Bytes(); n > budget {
				over.Store(n)
			}
			select {
			case <-stop:
				return
			default:
				time.Sleep(50 * time.Microsecond)
			}
		}
	})
	var appenders sync.WaitGroup
	for i, w := range ws {
		appenders.Go(func() {
			for round := range rounds {
				if _, err := w.Append(ctx, entries(t, ids(fmt.Sprint("w", i, "r", round), 20)...)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	appenders.Wait()
	close(stop)
	sampler.Wait()
	var held int64
	for _, w := range ws {
		held += heldBytes(w.w)
	}
	switch {
	case over.Load() > 0:
		t.Fatalf("the budget charged %d bytes, over its %d", over.Load(), budget)
	case held > budget:
		t.Fatalf("the writers' presence state holds %d bytes, over the budget of %d (charged: %d)", held, budget, b.Bytes())
	case b.Sheds() == 0 || held == 0:
		t.Fatalf("%d sheds, %d bytes held: the test did not fill the budget", b.Sheds(), held)
	}
	t.Logf("budget %d: %d bytes charged, %d held, %d sheds", budget, b.Bytes(), held, b.Sheds())
}

// shedAll drops every writer's presence state, as a charge that needs the
// whole budget would.
func shedAll(b *PresenceBudget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shedLocked(nil, 0)
}

// A writer whose presence state the budget dropped answers retries as it
// did before: ids it committed itself, and ids it inherited, in batches
// and in the generations merges folded them into, are already present
// with their first results, never committed again. The state is dropped
// before each retry and, throughout, beside the appends, so that a drop
// lands in the middle of their look-ups too.
func TestPresenceShedWriterAnswersRetries(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	first := inherit(t, store, "s", 4)
	b := NewPresenceBudget(64 << 20)
	opts := mergeOptions(t)
	opts.Presence = b
	w, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	stop := make(chan struct{})
	var shedder sync.WaitGroup
	shedder.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
				shedAll(b)
			}
		}
	})
	defer func() { close(stop); shedder.Wait() }()
	fromMemory := 0
	fromMerged := reappendRounds(t, w, store, "s-old", first, func() {
		w.w.mu.Lock()
		fromMemory += len(w.w.written.byID)
		w.w.mu.Unlock()
		shedAll(b)
	})
	switch {
	case fromMerged == 0:
		t.Fatalf("no retry was answered from a merged generation (%d merges): the test did not cover a merge", w.Stats().Merges)
	case fromMemory == 0 || b.Sheds() == 0:
		t.Fatalf("the writer remembered %d ids, shed %d times: the test dropped nothing", fromMemory, b.Sheds())
	}
}

// Writers that stop, however they stop (closed, aborted, fenced), leave
// the budget with what they held: a pod that cycles through shards does
// not fill it with writers that answer nothing. No goroutine is left.
func TestPresenceBudgetLeftByStoppedWriters(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	store := memstore.New()
	ctx := context.Background()
	b := NewPresenceBudget(64 << 20)
	ws := make([]*Writer, 6)
	for i := range ws {
		w, err := Open(ctx, store, fmt.Sprint("s", i), budgetOptions(t, b))
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
		if _, err := w.Append(ctx, entries(t, ids(fmt.Sprint("r", i), 5)...)); err != nil {
			t.Fatal(err)
		}
	}
	if b.Bytes() == 0 || b.accounts() != len(ws) {
		t.Fatalf("%d bytes charged by %d writers, want some by %d", b.Bytes(), b.accounts(), len(ws))
	}
	for _, w := range ws[:2] {
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range ws[2:4] {
		w.Abort()
	}
	for i, w := range ws[4:] {
		// Another writer claims the shard: the next append finds this
		// one fenced.
		next, err := Open(ctx, store, fmt.Sprint("s", 4+i), testOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.Append(ctx, entries(t, "after"))
		var fe *FencedError
		if !errors.As(err, &fe) {
			t.Fatalf("append after a takeover: %v, want fenced", err)
		}
		next.Abort()
		w.Abort()
	}
	if b.Bytes() != 0 || b.accounts() != 0 {
		t.Fatalf("after every writer stopped, %d bytes charged by %d writers, want none", b.Bytes(), b.accounts())
	}
}

// What a remembered batch is charged (batchBytes) is what it keeps on the
// heap, within 10% either way: footer entries with 18-byte ids, in batches
// of 20, up to the writer's cap. The generations' descriptors are the
// view's, and not counted.
func TestPresenceChargeIsTheHeapItHolds(t *testing.T) {
	before := settledHeap()
	o := newOwnBatches(maxOwnIDs)
	gens := make([]*storagepb.Generation, 0, maxOwnIDs/20)
	for pos := uint64(1); len(o.byID)+20 <= maxOwnIDs; pos++ {
		es := make([]*storagepb.FooterEntry, 20)
		for i := range es {
			es[i] = &storagepb.FooterEntry{Id: fmt.Sprintf("rollout-%08d-%04d", pos, i), Seq: pos}
		}
		g := &storagepb.Generation{Position: pos}
		gens = append(gens, g)
		o.add(&shardlog.Entry{Position: pos, Gen: g}, es)
	}
	after := settledHeap()
	viewBytes := int64(cap(gens))*8 + int64(len(gens))*int64((unsafe.Sizeof(storagepb.Generation{})+15)&^15)
	heap := int64(after-before) - viewBytes
	if o.bytes < heap*9/10 || o.bytes > heap*11/10 {
		t.Fatalf("%d ids are charged %d bytes; they hold %d on the heap", len(o.byID), o.bytes, heap)
	}
	t.Logf("%d ids: charged %d bytes, %d on the heap", len(o.byID), o.bytes, heap)
	runtime.KeepAlive(gens)
	runtime.KeepAlive(o)
}

// settledHeap returns the heap's live bytes once garbage collections stop
// changing it: the writers of earlier tests are freed a cycle after their
// handles' cleanups ran.
func settledHeap() uint64 {
	var ms runtime.MemStats
	var last uint64
	for i := range 50 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if i > 0 && ms.HeapAlloc < last+1024 && last < ms.HeapAlloc+1024 {
			break
		}
		last = ms.HeapAlloc
		time.Sleep(time.Millisecond)
	}
	return ms.HeapAlloc
}

// TestRetainGivesBackTheMapsRoom: once a checkpoint's retain leaves a
// writer a small part of the ids it held, the heap they leave behind is
// about what the budget still charges. Go maps never shrink, so tables
// sized for the peak would stay reachable, uncharged.
func TestRetainGivesBackTheMapsRoom(t *testing.T) {
	before := settledHeap()
	o := newOwnBatches(maxOwnIDs)
	var keep *storagepb.Generation
	for pos := uint64(1); len(o.byID)+20 <= maxOwnIDs; pos++ {
		es := make([]*storagepb.FooterEntry, 20)
		for i := range es {
			es[i] = &storagepb.FooterEntry{Id: fmt.Sprintf("rollout-%08d-%04d", pos, i), Seq: pos}
		}
		g := &storagepb.Generation{Position: pos}
		keep = g
		o.add(&shardlog.Entry{Position: pos, Gen: g}, es)
	}
	peak := int64(settledHeap() - before)
	o.retain(&storagepb.Manifest{Generations: []*storagepb.Generation{keep}})
	if len(o.byID) != 20 {
		t.Fatalf("retain kept %d ids, want the last batch's 20", len(o.byID))
	}
	heap := int64(settledHeap() - before)
	// Slack: the kept batch's own maps, and the allocator's rounding.
	if heap > 2*o.bytes+16<<10 {
		t.Fatalf("after retain, 20 ids are charged %d bytes and hold %d on the heap (%d at the peak)", o.bytes, heap, peak)
	}
	t.Logf("peak %d bytes on the heap; after retain %d, charged %d", peak, heap, o.bytes)
	runtime.KeepAlive(keep)
	runtime.KeepAlive(o)
}

// TestBudgetFullOfBusyWritersIsNotSearchedPerCharge: when the writers
// holding the budget are all busy, a charge that does not fit fails
// without searching them again each time, until one gives bytes back.
func TestBudgetFullOfBusyWritersIsNotSearchedPerCharge(t *testing.T) {
	b := NewPresenceBudget(1000)
	var busyMu, mu sync.Mutex
	busy := b.join(&busyMu, func() { t.Error("a busy writer was shed") })
	a := b.join(&mu, func() {})
	busyMu.Lock()
	if !busy.grow(900) {
		t.Fatal("the first charge did not fit")
	}
	for range 100 {
		if a.grow(200) {
			t.Fatal("a charge over the budget was granted")
		}
	}
	if b.scans > 1 {
		t.Fatalf("100 refused charges searched for writers to drop %d times, want 1", b.scans)
	}
	busy.settle(100) // a checkpoint gave bytes back
	busyMu.Unlock()
	if !a.grow(200) {
		t.Fatal("a charge that fits after bytes were given back was refused")
	}
}

// TestBudgetSearchThatGrantsLeavesSearchingOn: a search that makes room
// for its own charge, though not down to 7/8 of the budget, must not turn
// searching off for the next writer, which finds an idle writer to shed.
func TestBudgetSearchThatGrantsLeavesSearchingOn(t *testing.T) {
	b := NewPresenceBudget(1000)
	var wMu, aMu, xMu sync.Mutex
	w := b.join(&wMu, func() {})
	a := b.join(&aMu, func() {})
	x := b.join(&xMu, func() {})
	if !w.grow(880) || !a.grow(100) {
		t.Fatal("the first charges did not fit")
	}
	if !w.grow(100) { // sheds a, is granted, ends at 980: over 7/8
		t.Fatal("w's charge was refused with an idle writer to shed")
	}
	if !x.grow(50) { // w is idle: shedding it makes room
		t.Fatalf("x's charge was refused with an idle writer to shed (%d sheds)", b.Sheds())
	}
}
