package client

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// retryable decides from the code and the reason alone.
func TestRetryable(t *testing.T) {
	tests := []struct {
		code         codes.Code
		reason       string
		delay        time.Duration
		append, read bool
		// del: DeleteShard; cdel: with an expected last seq.
		del, cdel bool
	}{
		{codes.Unavailable, ReasonOutcomeUnknown, 0, true, false, false, false},
		// After the server's commit timeout, with its RetryInfo.
		{codes.Unavailable, ReasonOutcomeUnknown, 100 * time.Millisecond, true, false, false, false},
		{codes.DeadlineExceeded, ReasonOutcomeUnknown, 0, true, false, false, false},
		{codes.Unavailable, ReasonNotCommitted, 100 * time.Millisecond, true, false, true, true},
		{codes.DeadlineExceeded, ReasonNotCommitted, 0, true, false, true, true},
		{codes.ResourceExhausted, ReasonBackpressure, 200 * time.Millisecond, true, false, false, false},
		{codes.ResourceExhausted, ReasonRateLimited, time.Second, true, true, true, true},
		{codes.ResourceExhausted, ReasonRateLimited, 0, false, false, false, false},
		{codes.ResourceExhausted, ReasonTooLarge, 0, false, false, false, false},
		{codes.ResourceExhausted, ReasonStoreFull, 0, false, false, false, false},
		{codes.ResourceExhausted, "", 0, false, false, false, false},
		{codes.Unavailable, ReasonScanInterrupted, 0, false, true, false, false},
		{codes.Unavailable, "SOMETHING_NEW", 0, false, false, false, false},
		{codes.Unavailable, "", 0, true, true, false, true},
		{codes.DeadlineExceeded, "", 0, true, true, false, true},
		{codes.Canceled, "", 0, false, false, false, false},
		{codes.InvalidArgument, "", 0, false, false, false, false},
		{codes.AlreadyExists, "", 0, false, false, false, false},
		{codes.NotFound, "", 0, false, false, false, false},
		{codes.Internal, "", 0, false, false, false, false},
		{codes.FailedPrecondition, ReasonSeqMismatch, 0, false, false, false, false},
	}
	for _, tt := range tests {
		e := &Error{Code: tt.code, Reason: tt.reason, RetryDelay: tt.delay}
		if got := retryable(appendCall, e); got != tt.append {
			t.Errorf("Append %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.append)
		}
		if got := retryable(readCall, e); got != tt.read {
			t.Errorf("read %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.read)
		}
		if got := retryable(deleteCall, e); got != tt.del {
			t.Errorf("DeleteShard %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.del)
		}
		if got := retryable(conditionalDeleteCall, e); got != tt.cdel {
			t.Errorf("conditional DeleteShard %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.cdel)
		}
	}
}

// Waits grow to the cap, are jittered within [b/2, b], and are never
// shorter than the server's RetryInfo.
func TestBackoff(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	low := func(time.Duration) time.Duration { return 0 }
	high := func(n time.Duration) time.Duration { return n - 1 }
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		if lo, hi := p.backoff(n+1, 0, low), p.backoff(n+1, 0, high); lo != want/2 || hi != want {
			t.Errorf("attempt %d: waits %v..%v, want %v..%v", n+1, lo, hi, want/2, want)
		}
	}
	if got := p.backoff(1, 2*time.Second, low); got != 2*time.Second {
		t.Errorf("with a RetryInfo of 2s: %v", got)
	}
	if got := p.backoff(1, 2*time.Second, high); got != 2*time.Second+400*time.Millisecond {
		t.Errorf("with a RetryInfo of 2s, jittered: %v", got)
	}
}

// STORE_FULL is its own class: not a batch to split, not backpressure.
func TestStoreFullClass(t *testing.T) {
	e := &Error{Code: codes.ResourceExhausted, Reason: ReasonStoreFull}
	if !errors.Is(e, ErrStoreFull) || errors.Is(e, ErrTooLarge) || errors.Is(e, ErrBackpressure) || errors.Is(e, ErrOutcomeUnknown) {
		t.Errorf("STORE_FULL: ErrStoreFull %v, ErrTooLarge %v, ErrBackpressure %v, ErrOutcomeUnknown %v; want only the first",
			errors.Is(e, ErrStoreFull), errors.Is(e, ErrTooLarge), errors.Is(e, ErrBackpressure), errors.Is(e, ErrOutcomeUnknown))
	}
}
