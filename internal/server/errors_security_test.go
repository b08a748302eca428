package server

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
)

// Refusals by the policy and the rate limit map to their codes through
// toStatus, wrapped or not; a retryable rate-limit refusal carries RetryInfo,
// one that can never fit a BadRequest instead.
func TestToStatusSecurity(t *testing.T) {
	denied := fmt.Errorf("wrapped: %w", &authz.DeniedError{Identity: "spiffe://x", Verb: authz.Append, Shard: "team-a"})
	if st := status.Convert(toStatus(t.Context(), denied)); st.Code() != codes.PermissionDenied || st.Message() != denied.Error() || len(st.Details()) != 0 {
		t.Errorf("denied: %v %v", st, st.Details())
	}
	limited := fmt.Errorf("wrapped: %w", &ratelimit.LimitedError{Identity: "spiffe://x", Bytes: 10, Rate: 5, Burst: 20, Retry: 1500 * time.Millisecond})
	st := status.Convert(toStatus(t.Context(), limited))
	d := detailsOf(t, st)
	if st.Code() != codes.ResourceExhausted || d.reason(t) != rolloutv1.ErrorReason_RATE_LIMITED.String() || d.bad != nil {
		t.Fatalf("limited: %v %v", st, st.Details())
	}
	if d.retry.GetRetryDelay().AsDuration() != 1500*time.Millisecond {
		t.Errorf("RetryInfo %v", d.retry)
	}
	never := &ratelimit.LimitedError{Identity: "spiffe://x", Bytes: 30, Rate: 5, Burst: 20}
	st = status.Convert(toStatus(t.Context(), never))
	if d := detailsOf(t, st); st.Code() != codes.ResourceExhausted || d.reason(t) != rolloutv1.ErrorReason_RATE_LIMITED.String() || d.retry != nil || d.badField(t) != "records" {
		t.Errorf("over the burst: %v %v", st, st.Details())
	}
}
