package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/tap"

	"github.com/rolloutd/rolloutd/internal/authz"
)

// A stream ended by the receive timeout is already counted when it ends:
// its client, a scraper, or a test that sees the stream end must see
// recv_timeout move. The stream's cancel is wrapped to read the counter
// the moment the stream ends, so the order is checked without a race.
func TestRecvTimeoutCountedBeforeTheStreamEnds(t *testing.T) {
	a := newAdmission(Config{RecvTimeout: time.Hour}.withDefaults(), nil, nil)
	ctx, err := a.tap(context.Background(), &tap.Info{FullMethodName: appendMethod})
	if err != nil {
		t.Fatal(err)
	}
	r := reservationOf(ctx)
	seen := make(chan float64, 1)
	r.mu.Lock()
	cancel := r.cancel
	r.cancel = func(cause error) {
		cancel(cause)
		seen <- testutil.ToFloat64(a.refused.WithLabelValues(refusedRecvTimeout))
	}
	r.mu.Unlock()
	r.timer.Reset(0) // the receive timeout, now

	select {
	case n := <-seen:
		if n != 1 {
			t.Errorf("when the timed-out stream ended, recv_timeout counted %v, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the receive timeout did not end the stream")
	}
	<-ctx.Done()
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("the timed-out stream's context: %v, want DeadlineExceeded", ctx.Err())
	}
	// The stream's end releases its charge (on context.AfterFunc's
	// goroutine): wait for it, so that nothing outlives the test.
	for deadline := time.Now().Add(5 * time.Second); a.budget.inUse() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the timed-out stream still holds %d bytes", a.budget.inUse())
		}
	}
}

// A revoked stream is already counted when it ends (its context is
// cancelled), as the receive timeout's is.
func TestRevocationCountedBeforeTheStreamEnds(t *testing.T) {
	noScan := strings.Replace(testPolicy, "verbs: [append, get, scan]", "verbs: [append, get]", 1)
	p, err := authz.Parse([]byte(noScan))
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(Config{Authorizer: authz.NewStatic(p)}, nil)
	ctx, cancel := context.WithCancelCause(peerCtx(t, idTrainer))
	defer cancel(nil)
	seen := make(chan float64, 1)
	s := &guardedStream{g: g, ctx: ctx, method: rolloutPrefix + "Scan", verb: authz.Scan,
		identity: peerIdentity(ctx), shards: []string{"team-a/run1"}}
	s.cancel = func(cause error) {
		cancel(cause)
		seen <- testutil.ToFloat64(g.revoked.WithLabelValues(string(authz.Scan)))
	}

	if !g.recheckOne(s, false) {
		t.Fatal("the stream was not revoked")
	}
	if n := <-seen; n != 1 {
		t.Errorf("when the revoked stream ended, rolloutd_streams_revoked_total{verb=scan} was %v, want 1", n)
	}
	if s.revocation() == nil {
		t.Error("the revoked stream has no revocation")
	}
	if g.recheckOne(s, false) {
		t.Error("a second re-check revoked the stream again")
	}
	if n := testutil.ToFloat64(g.revoked.WithLabelValues(string(authz.Scan))); n != 1 {
		t.Errorf("after a second re-check, revoked counted %v, want 1", n)
	}
}
