package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Against an address where nothing listens (connections refused), a call
// makes exactly MaxAttempts attempts and fails within the waits' bounds
// (docs/clients.md), saying the server is unreachable. A small policy
// keeps it fast: waits of [25, 50], [50, 100], [100, 200] and [200, 400] ms.
func TestPolicyAgainstADeadAddress(t *testing.T) {
	addr := freeAddr(t)
	c := newClient(t, addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 5, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 400 * time.Millisecond}))
	start := time.Now()
	_, err := c.Get(context.Background(), "policy/dead", "r-1")
	took := time.Since(start)
	t.Logf("%v after %v", err, took)
	var e *client.Error
	if !errors.As(err, &e) || !errors.Is(err, client.ErrUnavailable) || e.Attempts != 5 {
		t.Fatalf("Get from a dead address: %v; want UNAVAILABLE after 5 attempts", err)
	}
	if min, max := 375*time.Millisecond, 750*time.Millisecond; took < min || took > max+500*time.Millisecond || e.Elapsed > took {
		t.Errorf("failed after %v (Elapsed %v), want %v..%v of waits plus the attempts", took, e.Elapsed, min, max)
	}
	want := fmt.Sprintf("rolloutd: Unavailable: server unreachable at %s: 5 attempts over %.1fs: ", addr, e.Elapsed.Seconds())
	if msg := err.Error(); !strings.HasPrefix(msg, want) || !strings.Contains(msg, "connection refused") {
		t.Errorf("the error says %q, want it to start %q and name the cause", msg, want)
	}
}

// A call made while the server restarts is answered by the restarted
// server within the default budget, about a reconnect backoff (at most
// 1.2 s) after it listens again, though the connection failed for 2 s.
// With gRPC's own reconnect backoff (1 s growing 1.6x) the connection
// could wait past the budget.
func TestPolicyReachesARestartedServer(t *testing.T) {
	addr := freeAddr(t)
	srv := startServer(t, "--listen", addr)
	c := newClient(t, addr)
	ctx := ctxFor(t, 30*time.Second)
	const shard = "policy/restart"
	if _, err := c.Append(ctx, shard, []*rolloutv1.Record{{Id: "r-1"}}); err != nil {
		t.Fatal(err)
	}
	srv.shutdown(t, 10*time.Second) // as SIGTERM does
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		_, err := c.Append(ctx, shard, []*rolloutv1.Record{{Id: "r-2"}})
		done <- result{err, time.Now()}
	}()
	time.Sleep(2 * time.Second)
	startOn(t, srv.dir, "--listen", addr)
	serving := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatalf("Append across the restart, after %v: %v", r.at.Sub(start), r.err)
	}
	t.Logf("answered %v after the restarted server listened, %v after the call began", r.at.Sub(serving), r.at.Sub(start))
	if lag := r.at.Sub(serving); lag > 2*time.Second {
		t.Errorf("answered %v after the restarted server listened, want within about 1.2 s", lag)
	}
}
