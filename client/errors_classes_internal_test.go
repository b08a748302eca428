package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// Every class of this package decides membership by the rule its comment
// states. The rules are spelt out here once more, as a table of classes and
// predicates, and checked over every code, every reason (and none, and one
// this client does not know), with and without a RetryInfo, and with and
// without an earlier attempt that may have landed.
func TestErrorClassesFollowTheirRules(t *testing.T) {
	rules := []struct {
		class error
		is    func(e *Error) bool
	}{
		{ErrNotFound, func(e *Error) bool { return e.Code == codes.NotFound }},
		{ErrAlreadyExists, func(e *Error) bool { return e.Code == codes.AlreadyExists }},
		{ErrInvalidArgument, func(e *Error) bool { return e.Code == codes.InvalidArgument }},
		{ErrPermissionDenied, func(e *Error) bool { return e.Code == codes.PermissionDenied }},
		{ErrUnauthenticated, func(e *Error) bool { return e.Code == codes.Unauthenticated }},
		{ErrTooLarge, func(e *Error) bool {
			return e.Reason == "TOO_LARGE" || (e.Reason == "RATE_LIMITED" && e.RetryDelay == 0) ||
				(e.Reason == "" && e.Code == codes.ResourceExhausted)
		}},
		{ErrUnavailable, func(e *Error) bool { return e.Code == codes.Unavailable }},
		{ErrOutcomeUnknown, func(e *Error) bool { return e.Reason == "OUTCOME_UNKNOWN" || e.unknown }},
		{ErrNotCommitted, func(e *Error) bool { return e.Reason == "NOT_COMMITTED" && !e.unknown }},
		{ErrBackpressure, func(e *Error) bool { return e.Reason == "BACKPRESSURE" }},
		{ErrRateLimited, func(e *Error) bool { return e.Reason == "RATE_LIMITED" }},
		{ErrStoreFull, func(e *Error) bool { return e.Reason == "STORE_FULL" }},
		{ErrScanInterrupted, func(e *Error) bool { return e.Reason == "SCAN_INTERRUPTED" }},
		{ErrShardDeleted, func(e *Error) bool { return e.Reason == "SHARD_DELETED" }},
		{ErrSeqMismatch, func(e *Error) bool { return e.Reason == "SEQ_MISMATCH" }},
		{ErrDataLoss, func(e *Error) bool { return e.Code == codes.DataLoss }},
		{ErrInternal, func(e *Error) bool { return e.Code == codes.Internal || e.Code == codes.Unknown }},
		{context.DeadlineExceeded, func(e *Error) bool { return e.Code == codes.DeadlineExceeded }},
		{context.Canceled, func(e *Error) bool { return e.Code == codes.Canceled }},
		{ErrClosed, func(*Error) bool { return false }},
		{errors.New("another package's error"), func(*Error) bool { return false }},
	}
	reasons := []string{"", "OUTCOME_UNKNOWN", "NOT_COMMITTED", "BACKPRESSURE", "RATE_LIMITED", "TOO_LARGE",
		"SCAN_INTERRUPTED", "SHARD_DELETED", "SEQ_MISMATCH", "STORE_FULL", "SOMETHING_NEW"}
	checked := 0
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		for _, reason := range reasons {
			for _, delay := range []time.Duration{0, time.Second} {
				for _, unknown := range []bool{false, true} {
					e := &Error{Code: code, Reason: reason, RetryDelay: delay, unknown: unknown}
					for _, r := range rules {
						if got, want := errors.Is(e, r.class), r.is(e); got != want {
							t.Errorf("errors.Is(%s %q delay %v unknown %v, %v) = %v, want %v", code, reason, delay, unknown, r.class, got, want)
						}
						checked++
					}
				}
			}
		}
	}
	t.Logf("checked %d memberships", checked)
}
