package server

import (
	"context"
	"testing"
	"time"
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
