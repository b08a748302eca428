package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

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

// A call made while the server restarts reaches the restarted server
// about a reconnect backoff (at most 1.2 s) after it listens again, though
// the connection failed for 2 s, and is answered within the default
// budget. With gRPC's own reconnect backoff (1 s growing 1.6x) the
// connection could wait past the budget. The reconnect is timed to when
// the server began the call (its access line's time less the call's
// duration), not to the answer: the restarted server opens the shard's
// writer first, and on a loaded disk its fsyncs alone took 1.8 s in CI.
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
	_, logs := startObserved(t, srv.dir, "--listen", addr)
	serving := time.Now()
	r := <-done
	if r.err != nil {
		t.Fatalf("Append across the restart, after %v: %v", r.at.Sub(start), r.err)
	}
	began, ok := callBegan(logs, "Append")
	if !ok {
		t.Fatalf("the restarted server logged no access line for the Append")
	}
	t.Logf("the restarted server began the call %v after it listened, answered it %v after, %v after the call began",
		began.Sub(serving), r.at.Sub(serving), r.at.Sub(start))
	if lag := began.Sub(serving); lag > 2*time.Second {
		t.Errorf("the call reached the restarted server %v after it listened, want within about 1.2 s", lag)
	}
}

// callBegan is when the server began the first call to method that it
// logged: its access line's time less the call's duration.
func callBegan(logs *observer.ObservedLogs, method string) (time.Time, bool) {
	for _, e := range logs.FilterMessage("rpc").FilterField(zap.String("method", method)).All() {
		if d, ok := e.ContextMap()["duration"].(time.Duration); ok {
			return e.Time.Add(-d), true
		}
	}
	return time.Time{}, false
}
