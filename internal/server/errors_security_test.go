package server

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
)

// Refusals by the policy and the rate limit map to their codes through
// toStatus, wrapped or not; a retryable rate-limit refusal carries RetryInfo.
func TestToStatusSecurity(t *testing.T) {
	denied := fmt.Errorf("wrapped: %w", &authz.DeniedError{Identity: "spiffe://x", Verb: authz.Append, Shard: "team-a"})
	if st := status.Convert(toStatus(denied)); st.Code() != codes.PermissionDenied || st.Message() != denied.Error() {
		t.Errorf("denied: %v", st)
	}
	limited := fmt.Errorf("wrapped: %w", &ratelimit.LimitedError{Identity: "spiffe://x", Bytes: 10, Rate: 5, Burst: 20, Retry: 1500 * time.Millisecond})
	st := status.Convert(toStatus(limited))
	if st.Code() != codes.ResourceExhausted || len(st.Details()) != 1 {
		t.Fatalf("limited: %v %v", st, st.Details())
	}
	if ri, ok := st.Details()[0].(*errdetails.RetryInfo); !ok || ri.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Errorf("RetryInfo %v", st.Details()[0])
	}
	never := &ratelimit.LimitedError{Identity: "spiffe://x", Bytes: 30, Rate: 5, Burst: 20}
	if st := status.Convert(toStatus(never)); st.Code() != codes.ResourceExhausted || len(st.Details()) != 0 {
		t.Errorf("over the burst: %v %v", st, st.Details())
	}
}
