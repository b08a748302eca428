package server

import (
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// Charging and releasing the budget allocates nothing while no one waits
// for it: every RPC releases its charges several times.
func TestBudgetReleaseAllocatesNothingWithoutWaiters(t *testing.T) {
	b := newBudget(1<<20, 1<<20, 1<<20)
	c := &connUsage{}
	if allocs := testing.AllocsPerRun(100, func() {
		_ = b.charge(c, "id", 100)
		_ = b.charge(c, "id", -100)
	}); allocs != 0 {
		t.Errorf("a charge and its release: %.1f allocations, want 0", allocs)
	}
}

// A waiter is still woken by the release it waits for.
func TestBudgetReleaseWakesAWaiter(t *testing.T) {
	b := newBudget(100, 100, 100)
	c := &connUsage{}
	if err := b.charge(c, "a", 100); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.chargeWait(context.Background(), c, "a", 50, 10*time.Second) }()
	// Let the waiter find the budget full, then release.
	for {
		b.mu.Lock()
		waiting := b.released != nil
		b.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = b.charge(c, "a", -100)
	if err := <-got; err != nil {
		t.Errorf("chargeWait after the release: %v", err)
	}
}

// A unary RPC's one response charge is held and handed back without
// allocating.
func TestOneResponseHoldAllocatesNothing(t *testing.T) {
	// Every RPC has a reservation of its own.
	rs := make([]reservation, 101)
	rc := &respCharge{}
	i := 0
	if allocs := testing.AllocsPerRun(100, func() {
		r := &rs[i]
		i++
		r.holds = 1
		if !r.holdResponse(rc) {
			t.Fatal("holdResponse refused a held reservation")
		}
		r.unholdResponse(rc)
	}); allocs != 0 {
		t.Errorf("holding one response: %.1f allocations, want 0", allocs)
	}
}

// The tap allocates a stream's reservation and the context carrying it
// once, together: admission's allocations per RPC, from the tap to the
// release of the stream's charge, stay within what its contexts, timer and
// callbacks need. The count includes the stream's own context (grpc's).
func TestAdmissionAllocationsPerRPC(t *testing.T) {
	a := newAdmission(Config{RecvTimeout: time.Hour}.withDefaults(), nil, nil)
	info := &tap.Info{FullMethodName: appendMethod}
	conn := &connUsage{}
	base := context.WithValue(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5}}), connKey{}, conn)
	allocs := testing.AllocsPerRun(200, func() {
		stream, end := context.WithCancel(base)
		ctx, err := a.tap(stream, info)
		if err != nil {
			t.Fatal(err)
		}
		r := reservationOf(ctx)
		if !r.enter() {
			t.Fatal("the stream ended before its handler ran")
		}
		if err := r.received(100, false); err != nil {
			t.Fatal(err)
		}
		r.exit()
		end()
		for a.budget.inUse() != 0 {
			runtime.Gosched() // the stream's end releases its charge on a goroutine of its own
		}
	})
	if allocs > maxAdmissionAllocs {
		t.Errorf("admission per RPC: %.1f allocations, want at most %d", allocs, maxAdmissionAllocs)
	}
}

// maxAdmissionAllocs: the stream's context (2), the tap's cancel context
// and its cause func, its timer and callback, the stream-end watch, its map
// entry and callback, and the reservation with its context (one). 17 when
// the last two were allocated apart.
const maxAdmissionAllocs = 16
