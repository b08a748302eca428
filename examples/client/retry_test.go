package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rolloutd/rolloutd/internal/server"
)

// failure builds a status error as rolloutd sends it: a code, a reason
// and, with retry > 0, a RetryInfo. The message says the opposite of the
// reason, to prove the client never reads it.
func failure(code codes.Code, reason string, retry time.Duration) error {
	return failureIn(errorDomain, code, reason, retry)
}

// failureIn is failure with an ErrorInfo of domain.
func failureIn(domain string, code codes.Code, reason string, retry time.Duration) error {
	st := status.New(code, "not stored, safe to retry; may have been stored")
	var details []protoadapt.MessageV1
	if reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: reason, Domain: domain})
	}
	if retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	st, err := st.WithDetails(details...)
	if err != nil {
		panic(err)
	}
	return st.Err()
}

func TestRetryAfter(t *testing.T) {
	// The client's copies of the reasons are the server's.
	for mine, theirs := range map[string]string{
		errorDomain: server.ErrorDomain, reasonOutcomeUnknown: server.ReasonOutcomeUnknown, reasonNotCommitted: server.ReasonNotCommitted,
		reasonBackpressure: server.ReasonBackpressure, reasonRateLimited: server.ReasonRateLimited,
	} {
		if mine != theirs {
			t.Errorf("client has %q, server %q", mine, theirs)
		}
	}
	tests := []struct {
		name  string
		err   error
		retry bool
		wait  time.Duration
	}{
		{"not committed", failure(codes.Unavailable, server.ReasonNotCommitted, 100*time.Millisecond), true, 100 * time.Millisecond},
		{"not sent", failure(codes.DeadlineExceeded, server.ReasonNotCommitted, 0), true, 0},
		{"outcome unknown", failure(codes.Unavailable, server.ReasonOutcomeUnknown, 0), true, 0},
		{"backpressure", failure(codes.ResourceExhausted, server.ReasonBackpressure, 200*time.Millisecond), true, 200 * time.Millisecond},
		{"rate limited", failure(codes.ResourceExhausted, server.ReasonRateLimited, 2*time.Second), true, 2 * time.Second},
		{"rate limited, never fits", failure(codes.ResourceExhausted, server.ReasonRateLimited, 0), false, 0},
		{"too large", failure(codes.ResourceExhausted, server.ReasonTooLarge, 0), false, 0},
		{"unknown reason", failure(codes.Unavailable, "SOMETHING_NEW", 0), false, 0},
		{"another domain", failureIn("example.com", codes.ResourceExhausted, server.ReasonBackpressure, 0), false, 0},
		{"unavailable without a reason", status.Error(codes.Unavailable, "connection refused"), true, 0},
		{"invalid", status.Error(codes.InvalidArgument, "retry with the same ids"), false, 0},
		{"already exists", status.Error(codes.AlreadyExists, "x"), false, 0},
		{"not a status", errors.New("boom"), false, 0},
	}
	for _, tt := range tests {
		if retry, wait := retryAfter(tt.err); retry != tt.retry || wait != tt.wait {
			t.Errorf("%s: retryAfter = %v, %v; want %v, %v", tt.name, retry, wait, tt.retry, tt.wait)
		}
	}
}

// invokerOf returns an invoker that fails with errs in turn, then succeeds,
// and counts its calls.
func invokerOf(calls *int, errs ...error) grpc.UnaryInvoker {
	return func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		*calls++
		if *calls <= len(errs) {
			return errs[*calls-1]
		}
		return nil
	}
}

func TestRetryByReason(t *testing.T) {
	notCommitted := failure(codes.Unavailable, server.ReasonNotCommitted, time.Millisecond)
	tooLarge := failure(codes.ResourceExhausted, server.ReasonTooLarge, 0)
	tests := []struct {
		name  string
		errs  []error
		calls int
		err   error
	}{
		{"heals", []error{notCommitted, failure(codes.Unavailable, server.ReasonOutcomeUnknown, 0)}, 3, nil},
		{"does not resend what cannot fit", []error{tooLarge}, 1, tooLarge},
		{"gives up after its attempts", []error{notCommitted, notCommitted, notCommitted, notCommitted, notCommitted}, maxAttempts, notCommitted},
	}
	for _, tt := range tests {
		var calls int
		err := retryByReason(context.Background(), "/rollout.v1.RolloutService/Append", nil, nil, nil, invokerOf(&calls, tt.errs...))
		if calls != tt.calls || !errors.Is(err, tt.err) {
			t.Errorf("%s: %d calls, %v; want %d, %v", tt.name, calls, err, tt.calls, tt.err)
		}
	}
	// The wait honours the server's RetryInfo, and never outlasts the
	// call's context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var calls int
	start := time.Now()
	err := retryByReason(ctx, "/rollout.v1.RolloutService/Append", nil, nil, nil, invokerOf(&calls, failure(codes.ResourceExhausted, server.ReasonRateLimited, time.Hour)))
	if calls != 1 || status.Code(err) != codes.ResourceExhausted || time.Since(start) > 5*time.Second {
		t.Errorf("a retry an hour away: %d calls, %v after %v", calls, err, time.Since(start))
	}
}
