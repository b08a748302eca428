package client

import (
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// TestReasonWireStrings pins, byte for byte and as literals, the ErrorInfo
// reasons the server sends today (internal/server's TestReasonWireStrings
// pins the same list on its side). The client, like the server and the
// Python client, takes them from rolloutv1.ErrorReason's value names, so a
// renamed value, or a regenerated enum with a changed byte, fails here: a
// status carrying the literal must still decode into its reason's class.
// Every value the enum has must be listed, so that a new reason gets its
// string pinned, and a class, too.
func TestReasonWireStrings(t *testing.T) {
	unlisted := map[rolloutv1.ErrorReason]string{}
	for n, name := range rolloutv1.ErrorReason_name {
		if n != 0 { // never sent
			unlisted[rolloutv1.ErrorReason(n)] = name
		}
	}
	for _, tc := range []struct {
		wire   string // as sent; never built from the enum
		number rolloutv1.ErrorReason
		named  string // this package's name for it
		code   codes.Code
		class  error
	}{
		{"OUTCOME_UNKNOWN", 1, ReasonOutcomeUnknown, codes.Unavailable, ErrOutcomeUnknown},
		{"NOT_COMMITTED", 2, ReasonNotCommitted, codes.Unavailable, ErrNotCommitted},
		{"BACKPRESSURE", 3, ReasonBackpressure, codes.ResourceExhausted, ErrBackpressure},
		{"RATE_LIMITED", 4, ReasonRateLimited, codes.ResourceExhausted, ErrRateLimited},
		{"TOO_LARGE", 5, ReasonTooLarge, codes.ResourceExhausted, ErrTooLarge},
		{"SCAN_INTERRUPTED", 6, ReasonScanInterrupted, codes.Unavailable, ErrScanInterrupted},
		{"SHARD_DELETED", 7, ReasonShardDeleted, codes.NotFound, ErrShardDeleted},
		{"SEQ_MISMATCH", 8, ReasonSeqMismatch, codes.FailedPrecondition, ErrSeqMismatch},
		{"STORE_FULL", 9, ReasonStoreFull, codes.ResourceExhausted, ErrStoreFull},
		{"CONSUMER_RESET", 10, ReasonConsumerReset, codes.FailedPrecondition, ErrConsumerReset},
	} {
		if got := tc.number.String(); got != tc.wire {
			t.Errorf("rolloutv1.ErrorReason(%d) is named %q, want %q: its name is the wire string", tc.number, got, tc.wire)
		}
		if tc.named != tc.wire {
			t.Errorf("the client names reason %d %q, want %q", tc.number, tc.named, tc.wire)
		}
		st, err := status.New(tc.code, "m").WithDetails(&errdetails.ErrorInfo{Reason: tc.wire, Domain: "rolloutd.io"})
		if err != nil {
			t.Fatal(err)
		}
		if e := newError(st.Err(), 1); e.Reason != tc.wire || !errors.Is(e, tc.class) {
			t.Errorf("%s with reason %q decodes to reason %q, errors.Is(%v) %v", tc.code, tc.wire, e.Reason, tc.class, errors.Is(e, tc.class))
		}
		delete(unlisted, tc.number)
	}
	for n, name := range unlisted {
		t.Errorf("rolloutv1.ErrorReason %s (%d) has no wire string pinned here", name, n)
	}
}
