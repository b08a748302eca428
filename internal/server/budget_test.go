package server

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// The budget refuses a charge over the server's limit, the connection's
// share or the identity's share, naming which, and charges nothing then;
// releases always succeed and leave no trace.
func TestBudgetShares(t *testing.T) {
	b := newBudget(100, 40, 60)
	c1, c2, c3, c4 := &connUsage{}, &connUsage{}, &connUsage{}, &connUsage{}
	steps := []struct {
		conn     *connUsage
		identity string
		n        int64
		share    string // "" means admitted
	}{
		{c1, "a", 40, ""},
		{c1, "a", 1, shareConnection},
		{c2, "a", 20, ""},
		{c2, "a", 1, shareIdentity},
		{c3, "b", 40, ""},
		{c4, "c", 1, shareServer},
		{c1, "a", -40, ""},
		{c4, "c", 1, ""},
	}
	for i, s := range steps {
		err := b.charge(s.conn, s.identity, s.n)
		var oe *OverBudgetError
		switch {
		case s.share == "" && err != nil:
			t.Fatalf("step %d: %v, want admitted", i, err)
		case s.share != "" && (!errors.As(err, &oe) || oe.Share != s.share || !errors.Is(err, ErrOverBudget)):
			t.Fatalf("step %d: %v, want refused over the %s share", i, err, s.share)
		}
	}
	if got := b.inUse(); got != 61 {
		t.Fatalf("in use %d, want 61 (refused charges charge nothing)", got)
	}
	for _, r := range []struct {
		c  *connUsage
		id string
		n  int64
	}{{c2, "a", -20}, {c3, "b", -40}, {c4, "c", -1}} {
		if err := b.charge(r.c, r.id, r.n); err != nil {
			t.Fatal(err)
		}
	}
	if b.inUse() != 0 || b.identities() != 0 || c1.used+c2.used+c3.used+c4.used != 0 {
		t.Fatalf("after releasing everything: in use %d, %d identities", b.inUse(), b.identities())
	}
}

// A reservation becomes its decoded cost, may be refused growing past the
// budget, and is released only when both the stream and the handler are
// done, whichever is last.
func TestReservationLifecycle(t *testing.T) {
	b := newBudget(1000, 1000, 1000)
	conn := &connUsage{}
	if err := b.charge(conn, "a", 100); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &reservation{budget: b, conn: conn, identity: "a", overhead: 10, held: 100, holds: 1, cancel: cancel,
		timer: time.NewTimer(time.Hour)}
	r.unwatch = context.AfterFunc(ctx, r.streamEnded)

	if !r.enter() {
		t.Fatal("enter on a live stream failed")
	}
	if err := r.received(40, false); err != nil || b.inUse() != 50 {
		t.Fatalf("decoded 40 (+10 overhead): %v, in use %d, want 50", err, b.inUse())
	}
	if err := r.received(2000, false); !errors.Is(err, ErrOverBudget) || b.inUse() != 50 {
		t.Fatalf("decoded past the budget: %v, in use %d, want refused and 50", err, b.inUse())
	}
	if err := r.received(5, true); err != nil || b.inUse() != 50 {
		t.Fatalf("keep: %v, in use %d, want 50", err, b.inUse())
	}

	cancel(nil) // the stream ends while the handler still runs
	time.Sleep(10 * time.Millisecond)
	if b.inUse() != 50 {
		t.Fatalf("released %d while the handler runs", 50-b.inUse())
	}
	r.exit()
	if b.inUse() != 0 {
		t.Fatalf("in use %d after the stream and the handler ended", b.inUse())
	}
	if r.enter() {
		t.Fatal("enter after release succeeded")
	}
}

// The default budget is a fraction of GOMEMLIMIT when set, and the fixed
// default without any limit; a budget too small for the message limit is
// refused with what to set.
func TestBudgetDefaultsAndValidation(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	debug.SetMemoryLimit(1800 << 20)
	got, from := DefaultRequestBudget()
	want := int64(float64(1800<<20) * budgetMemoryFraction)
	// A cgroup limit below GOMEMLIMIT would win.
	if from == "GOMEMLIMIT" && got != want || from != "GOMEMLIMIT" && !strings.HasPrefix(from, "cgroup") {
		t.Errorf("with GOMEMLIMIT=1800MiB: budget %d from %s, want %d from GOMEMLIMIT", got, from, want)
	}

	_, err := New(Config{Store: memstore.New(), MaxMessageBytes: 64 << 20, MaxRecordBytes: 1 << 20, RequestBudgetBytes: 512 << 20})
	if err == nil || !strings.Contains(err.Error(), "raise the budget") {
		t.Errorf("a 512 MiB budget for 64 MiB messages: %v, want refused", err)
	}
	s, err := New(Config{Store: memstore.New()})
	if err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	stopUnserved(t, s)
	if s.cfg.RequestBudgetBytes <= 0 || s.cfg.RecvTimeout != DefaultRecvTimeout {
		t.Errorf("defaults: budget %d, receive timeout %s", s.cfg.RequestBudgetBytes, s.cfg.RecvTimeout)
	}
}
