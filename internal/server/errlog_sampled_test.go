package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// The line that says how many of a client's error lines were dropped
// (dropped_lines) is written even when the access log's sampler has had
// its fill of "rpc failed" lines that second: sampled out, the count it
// carries would be lost, as the error-line rate had already reset it.
func TestDroppedLinesAreNotSampledOut(t *testing.T) {
	s, ctx, logs := interceptorServer(t, nil)
	now := time.Now()
	s.errLog.now = func() time.Time { return now }
	req := &rolloutv1.ListShardsRequest{PageToken: "forged"}
	info := &grpc.UnaryServerInfo{FullMethod: rolloutPrefix + "ListShards"}
	fail := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.InvalidArgument, "bad page token")
	}
	// The error-line rate lets errorLogBurst lines through, the sampler
	// the first 10 of them; the rest of the calls' lines are dropped.
	const calls = 100
	for range calls {
		_, _ = s.accessLog(ctx, req, info, fail)
	}
	now = now.Add(time.Second) // the client may write a line again
	_, _ = s.accessLog(ctx, req, info, fail)
	// Before the fix: none, unless the sampler's second turned over
	// between the calls.
	got := logs.FilterMessage("rpc failed").FilterFieldKey("dropped_lines").All()
	if len(got) != 1 {
		t.Fatalf("%d lines say how many were dropped, want 1", len(got))
	}
	if n := got[0].ContextMap()["dropped_lines"]; n != int64(calls-errorLogBurst) {
		t.Errorf("dropped_lines %v, want %d", n, calls-errorLogBurst)
	}
}
