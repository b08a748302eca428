package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// answeredClient is a client whose calls an interceptor answers before
// the transport, so that only what the client adds around a call runs.
func answeredClient(tb testing.TB) *client.Client {
	tb.Helper()
	answer := grpc.WithChainUnaryInterceptor(func(context.Context, string, any, any, *grpc.ClientConn, grpc.UnaryInvoker, ...grpc.CallOption) error {
		return nil
	})
	c, err := client.New("passthrough:///unused", client.WithDialOptions(answer))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// A call answered at its first attempt, nearly every call, costs one
// timer: its attempt's deadline is the earlier of the attempt's and the
// call's. The call's own context is made only for a retry.
func TestFirstAttemptCostsOneTimer(t *testing.T) {
	c := answeredClient(t)
	ctx := context.Background()
	records := []*rolloutv1.Record{{Id: "a", Content: "x"}}
	// Before the fix: 23 (two contexts with timers, the second one
	// registered with the first).
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.Append(ctx, "bench/s", records); err != nil {
			t.Fatal(err)
		}
	}); allocs > 16 {
		t.Errorf("an Append answered at once costs the client %v allocations, want at most 16", allocs)
	}
}

// BenchmarkAppendWrapping is what the client adds to one Append around the
// gRPC call: the request id, the shard header, the retry loop and its
// timeouts, the trace interceptor.
//
//	go test -run '^$' -bench AppendWrapping -benchmem ./client
func BenchmarkAppendWrapping(b *testing.B) {
	c := answeredClient(b)
	ctx := context.Background()
	records := []*rolloutv1.Record{{Id: "a", Content: "x"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Append(ctx, "bench/s", records); err != nil {
			b.Fatal(err)
		}
	}
}

// Without a deadline of the caller's, the call timeout bounds the whole
// call, every attempt and wait, and each attempt gets at most the attempt
// timeout; the last one is cut to what is left of the call's.
func TestCallTimeoutBoundsAttempts(t *testing.T) {
	const attemptTimeout, callTimeout = 100 * time.Millisecond, 350 * time.Millisecond
	type attempt struct{ began, deadline time.Time }
	var attempts []attempt
	hang := grpc.WithChainUnaryInterceptor(func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ grpc.UnaryInvoker, _ ...grpc.CallOption) error {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Error("an attempt without a deadline")
		}
		attempts = append(attempts, attempt{time.Now(), dl})
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	})
	c, err := client.New("passthrough:///unused", client.WithDialOptions(hang),
		client.WithAttemptTimeout(attemptTimeout), client.WithCallTimeout(callTimeout),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 100, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Get(context.Background(), "s", "a")
	elapsed := time.Since(start)
	if e := (*client.Error)(nil); !errors.As(err, &e) || e.Code != codes.DeadlineExceeded {
		t.Errorf("Get: %v, want DeadlineExceeded", err)
	}
	if elapsed < callTimeout || elapsed > callTimeout+300*time.Millisecond {
		t.Errorf("the call took %v, want its call timeout %v", elapsed, callTimeout)
	}
	if len(attempts) < 3 {
		t.Fatalf("%d attempts in %v with an attempt timeout of %v", len(attempts), callTimeout, attemptTimeout)
	}
	for i, a := range attempts {
		if a.deadline.Sub(a.began) > attemptTimeout {
			t.Errorf("attempt %d: deadline %v after it began, more than the attempt timeout", i+1, a.deadline.Sub(a.began))
		}
		// The client's call began a moment after start.
		if a.deadline.After(start.Add(callTimeout + 5*time.Millisecond)) {
			t.Errorf("attempt %d: deadline %v past the call's", i+1, a.deadline.Sub(start))
		}
	}
	if last := attempts[len(attempts)-1]; last.deadline.Sub(last.began) >= attemptTimeout {
		t.Errorf("the last attempt was given %v, want what was left of the call's %v", last.deadline.Sub(last.began), callTimeout)
	}
}
