package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo details rolloutd
// sends. Reasons of other domains are ignored.
const ErrorDomain = "rolloutd.io"

// The reasons (ReasonOutcomeUnknown, …) are constants generated from the
// enum rolloutv1.ErrorReason, in reasons_gen.go; the Err classes below say
// how this client reads each.
//go:generate go run ./internal/cmd/reasonsgen

// MetadataResumeAfterSeq is the ErrorInfo metadata key of an interrupted
// Scan's resume cursor, in decimal.
const MetadataResumeAfterSeq = "resume_after_seq"

// Classes of errors, for errors.Is. An *Error matches every class its code
// and reason belong to; each class says which, where it is declared.
var (
	// ErrNotFound: NOT_FOUND, the shard was never written or has no such id.
	ErrNotFound = byCode(codes.NotFound, "not found")
	// ErrAlreadyExists: ALREADY_EXISTS, the id is stored with different
	// content (or a request_id was reused for different records).
	ErrAlreadyExists = byCode(codes.AlreadyExists, "already exists with different content")
	// ErrInvalidArgument: INVALID_ARGUMENT; the message names the field.
	ErrInvalidArgument = byCode(codes.InvalidArgument, "invalid argument")
	// ErrPermissionDenied: PERMISSION_DENIED by the server's policy.
	ErrPermissionDenied = byCode(codes.PermissionDenied, "permission denied")
	// ErrUnauthenticated: UNAUTHENTICATED.
	ErrUnauthenticated = byCode(codes.Unauthenticated, "unauthenticated")
	// ErrTooLarge: the request can never succeed as it is; split the batch
	// or shrink the record. Reason TOO_LARGE (Field names the record or
	// "records"), RATE_LIMITED without a RetryInfo (the call is larger than
	// the rate limit's burst), or RESOURCE_EXHAUSTED without a reason (a
	// message over gRPC's size limit, on either side).
	ErrTooLarge = newClass("request too large", func(e *Error) bool {
		return e.Reason == ReasonTooLarge ||
			(e.Reason == ReasonRateLimited && e.RetryDelay == 0) ||
			(e.Reason == "" && e.Code == codes.ResourceExhausted)
	})
	// ErrUnavailable: UNAVAILABLE, whatever the reason.
	ErrUnavailable = byCode(codes.Unavailable, "unavailable")
	// ErrOutcomeUnknown: an Append that may or may not have been stored:
	// reason OUTCOME_UNKNOWN, or an Append failure without an ErrorInfo
	// (UNAVAILABLE, DEADLINE_EXCEEDED or CANCELLED from the transport or
	// the call's context). Resend it with the same request_id
	// (WithRequestID) to learn the outcome. Also a DeleteShard that may
	// have taken effect, on the same failures (see DeleteShard).
	ErrOutcomeUnknown = newClass("outcome unknown", func(e *Error) bool {
		return e.Reason == ReasonOutcomeUnknown || e.unknown
	})
	// ErrNotCommitted: reason NOT_COMMITTED, the Append was not stored.
	ErrNotCommitted = newClass("not committed", func(e *Error) bool {
		// Not when an earlier attempt of the same Append may have landed.
		return e.Reason == ReasonNotCommitted && !e.unknown
	})
	// ErrBackpressure: reason BACKPRESSURE.
	ErrBackpressure = byReason(rolloutv1.ErrorReason_BACKPRESSURE, "backpressure")
	// ErrRateLimited: reason RATE_LIMITED.
	ErrRateLimited = byReason(rolloutv1.ErrorReason_RATE_LIMITED, "rate limited")
	// ErrStoreFull: reason STORE_FULL, the server's storage is out of
	// space and the Append was not stored; it needs an operator, not a
	// resend.
	ErrStoreFull = byReason(rolloutv1.ErrorReason_STORE_FULL, "server storage full")
	// ErrConsumerReset: reason CONSUMER_RESET, a CommitConsumer for a
	// consumer generation older than the consumer's: it was reset since
	// the subscription whose positions these are started, and nothing was
	// stored. Start a new subscription from the consumer; the ErrorInfo
	// metadata "generation" (Error.Metadata) holds its generation. A
	// Subscription ends with it too when a resumed stream finds its
	// consumer at another generation, or deleted (an error of the client's
	// own, not an *Error).
	ErrConsumerReset = byReason(rolloutv1.ErrorReason_CONSUMER_RESET, "consumer reset")
	// ErrScanInterrupted: reason SCAN_INTERRUPTED; Scan resumes by itself
	// until its retry budget is spent.
	ErrScanInterrupted = byReason(rolloutv1.ErrorReason_SCAN_INTERRUPTED, "scan interrupted")
	// ErrDataLoss: DATA_LOSS, stored bytes failed their checksum.
	ErrDataLoss = byCode(codes.DataLoss, "data loss")
	// ErrInternal: INTERNAL, a bug in rolloutd (or UNKNOWN).
	ErrInternal = newClass("internal error", func(e *Error) bool {
		return e.Code == codes.Internal || e.Code == codes.Unknown
	})
	// ErrClosed: the Client was closed. No *Error is one: the call never
	// reached the server.
	ErrClosed = errors.New("client closed")
)

// class is an error class an *Error may belong to (errors.Is): one of the
// Err values above, with the rule that decides membership.
type class struct {
	text  string
	match func(*Error) bool
}

func (c *class) Error() string { return c.text }

// newClass is the class of the errors match accepts.
func newClass(text string, match func(*Error) bool) error {
	return &class{text: text, match: match}
}

// byCode is the class of the errors with code, whatever their reason.
func byCode(code codes.Code, text string) error {
	return newClass(text, func(e *Error) bool { return e.Code == code })
}

// byReason is the class of the errors with reason, whatever their code.
func byReason(reason rolloutv1.ErrorReason, text string) error {
	wire := reason.String()
	return newClass(text, func(e *Error) bool { return e.Reason == wire })
}

// Error is a failed call: the last attempt's status as the server (or the
// transport) sent it, with its details decoded.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is the ErrorInfo reason of domain ErrorDomain, "" without one.
	Reason string
	// Metadata is that ErrorInfo's metadata (MetadataResumeAfterSeq).
	Metadata map[string]string
	// Message is the status message, for people: decide from Code and
	// Reason (or errors.Is), never from it.
	Message string
	// RetryDelay is the RetryInfo delay, 0 without one.
	RetryDelay time.Duration
	// Field and FieldDescription are the first BadRequest field violation
	// ("records[3]", or "records" for the batch), "" without one.
	Field, FieldDescription string
	// Attempts is how many attempts the call made; for Scan, how many
	// attempts in a row failed without receiving anything.
	Attempts int
	// Elapsed is how long the call took, from its start until it gave up;
	// for Scan, from the break.
	Elapsed time.Duration

	// unknown: an Append failure that counts as OUTCOME_UNKNOWN: it has no
	// ErrorInfo, or an earlier attempt of the same Append may have landed.
	unknown bool
	// unreachable is the client's target when the call gave up without
	// an answer and the connection was not READY.
	unreachable string
	st          *status.Status
}

// newError decodes err, the error of an RPC, into an *Error. err is a gRPC
// status error, or a context error of the call.
func newError(err error, attempts int) *Error {
	st := status.Convert(err)
	if st.Code() == codes.Unknown {
		// A context error that did not come through gRPC.
		if fromCtx := status.FromContextError(err); fromCtx.Code() != codes.Unknown {
			st = fromCtx
		}
	}
	e := &Error{Code: st.Code(), Message: st.Message(), Attempts: attempts, st: st}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == ErrorDomain && e.Reason == "" {
				e.Reason, e.Metadata = d.GetReason(), d.GetMetadata()
			}
		case *errdetails.RetryInfo:
			e.RetryDelay = d.GetRetryDelay().AsDuration()
		case *errdetails.BadRequest:
			if v := d.GetFieldViolations(); len(v) > 0 && e.Field == "" {
				e.Field, e.FieldDescription = v[0].GetField(), v[0].GetDescription()
			}
		}
	}
	return e
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rolloutd: ")
	b.WriteString(e.Code.String())
	if e.Reason != "" {
		b.WriteString(" (" + e.Reason + ")")
	}
	if e.unreachable != "" {
		fmt.Fprintf(&b, ": server unreachable at %s: %s: %s", e.unreachable, e.tries(), e.Message)
		return b.String()
	}
	b.WriteString(": " + e.Message)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (%s)", e.tries())
	}
	return b.String()
}

// tries is "8 attempts over 6.1s", as the Python client writes it.
func (e *Error) tries() string {
	noun := "attempts"
	if e.Attempts == 1 {
		noun = "attempt"
	}
	return fmt.Sprintf("%d %s over %.1fs", e.Attempts, noun, e.Elapsed.Seconds())
}

// Is reports whether e belongs to the class target: one of this package's
// Err values, or context.DeadlineExceeded and context.Canceled for the
// codes DEADLINE_EXCEEDED and CANCELLED.
func (e *Error) Is(target error) bool {
	switch target {
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	case context.Canceled:
		return e.Code == codes.Canceled
	}
	c, ok := target.(*class)
	return ok && c.match(e)
}

// GRPCStatus returns the status the error was decoded from, so that
// status.Code and status.FromError see it.
func (e *Error) GRPCStatus() *status.Status { return e.st }
