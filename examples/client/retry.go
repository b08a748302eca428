package main

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The ErrorInfo domain and reasons rolloutd sends (see "Errors and
// retries" in the README, or proto/rollout/v1/rollout.proto).
const (
	errorDomain          = "rolloutd.io"
	reasonOutcomeUnknown = "OUTCOME_UNKNOWN"
	reasonNotCommitted   = "NOT_COMMITTED"
	reasonBackpressure   = "BACKPRESSURE"
	reasonRateLimited    = "RATE_LIMITED"
)

// Retry budget of one call.
const (
	maxAttempts  = 4
	firstBackoff = 100 * time.Millisecond
)

// retryAfter says whether a call that failed with err is worth sending
// again as it is, and the least time to wait first. It decides from the
// status code and the ErrorInfo reason, never from the message text.
//
// Resending is what this client does for OUTCOME_UNKNOWN too: its records
// carry their own ids or ids derived from the request_id, so records that
// did land come back already_present. A client that sends records without
// ids and without a request_id must treat OUTCOME_UNKNOWN as "maybe
// stored" and not resend.
func retryAfter(err error) (bool, time.Duration) {
	st := status.Convert(err)
	var reason string
	var wait time.Duration
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == errorDomain {
				reason = d.GetReason()
			}
		case *errdetails.RetryInfo:
			wait = d.GetRetryDelay().AsDuration()
		}
	}
	switch reason {
	case reasonOutcomeUnknown, reasonNotCommitted, reasonBackpressure:
		return true, wait
	case reasonRateLimited:
		// Without a RetryInfo the call is larger than the limit's burst and
		// never fits.
		return wait > 0, wait
	case "":
		// No reason: an UNAVAILABLE from Get (storage), or from the
		// connection before rolloutd answered. Resending the same
		// request is safe for the same reason as OUTCOME_UNKNOWN.
		return st.Code() == codes.Unavailable, wait
	}
	// A reason this client does not know (TOO_LARGE, SCAN_INTERRUPTED, or a
	// newer one): not a plain resend.
	return false, 0
}

// retryByReason is a unary client interceptor that resends a call that
// failed in a way retryAfter says is worth it, up to maxAttempts times,
// waiting the longer of the server's RetryInfo and a jittered, growing
// backoff, and never past the call's context.
func retryByReason(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || attempt == maxAttempts {
			return err
		}
		retry, wait := retryAfter(err)
		if !retry {
			return err
		}
		wait = max(wait, backoff/2+rand.N(backoff/2+1))
		backoff *= 2
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
