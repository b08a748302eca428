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
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo details rolloutd
// sends. Reasons of other domains are ignored.
const ErrorDomain = "rolloutd.io"

// The reasons of rolloutd's ErrorInfo details (see "Errors and retries" in
// the README, and proto/rollout/v1/rollout.proto).
const (
	// ReasonOutcomeUnknown: the Append may or may not have been stored.
	// The server sends it on UNAVAILABLE with a RetryInfo (a commit it
	// gave up on after its own commit timeout included), and on
	// DEADLINE_EXCEEDED or CANCELLED only when the call's own deadline
	// passed or it was cancelled.
	ReasonOutcomeUnknown = "OUTCOME_UNKNOWN"
	// ReasonNotCommitted: the Append was certainly not stored.
	ReasonNotCommitted = "NOT_COMMITTED"
	// ReasonBackpressure: the shard's writer or the server is full;
	// nothing was stored.
	ReasonBackpressure = "BACKPRESSURE"
	// ReasonRateLimited: the caller is over its append rate limit; nothing
	// was stored. Without a RetryInfo the call never fits: split it.
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonTooLarge: a record or the batch is over a server limit.
	ReasonTooLarge = "TOO_LARGE"
	// ReasonScanInterrupted: a Scan ended early; MetadataResumeAfterSeq
	// says where to resume.
	ReasonScanInterrupted = "SCAN_INTERRUPTED"
	// ReasonStoreFull: the server's storage is out of space; the Append
	// was not stored. Appends succeed again once an operator frees space,
	// so it is not resent by itself.
	ReasonStoreFull = "STORE_FULL"
)

// MetadataResumeAfterSeq is the ErrorInfo metadata key of an interrupted
// Scan's resume cursor, in decimal.
const MetadataResumeAfterSeq = "resume_after_seq"

// Classes of errors, for errors.Is. An *Error matches every class its code
// and reason belong to.
var (
	// ErrNotFound: NOT_FOUND, the shard was never written or has no such id.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: ALREADY_EXISTS, the id is stored with different
	// content (or a request_id was reused for different records).
	ErrAlreadyExists = errors.New("already exists with different content")
	// ErrInvalidArgument: INVALID_ARGUMENT; the message names the field.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrPermissionDenied: PERMISSION_DENIED by the server's policy.
	ErrPermissionDenied = errors.New("permission denied")
	// ErrUnauthenticated: UNAUTHENTICATED.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrTooLarge: the request can never succeed as it is; split the batch
	// or shrink the record. Reason TOO_LARGE (Field names the record or
	// "records"), RATE_LIMITED without a RetryInfo (the call is larger than
	// the rate limit's burst), or RESOURCE_EXHAUSTED without a reason (a
	// message over gRPC's size limit, on either side).
	ErrTooLarge = errors.New("request too large")
	// ErrUnavailable: UNAVAILABLE, whatever the reason.
	ErrUnavailable = errors.New("unavailable")
	// ErrOutcomeUnknown: an Append that may or may not have been stored:
	// reason OUTCOME_UNKNOWN, or an Append failure without an ErrorInfo
	// (UNAVAILABLE, DEADLINE_EXCEEDED or CANCELLED from the transport or
	// the call's context). Resend it with the same request_id
	// (WithRequestID) to learn the outcome. Also a DeleteShard that may
	// have taken effect, on the same failures (see DeleteShard).
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrNotCommitted: reason NOT_COMMITTED, the Append was not stored.
	ErrNotCommitted = errors.New("not committed")
	// ErrBackpressure: reason BACKPRESSURE.
	ErrBackpressure = errors.New("backpressure")
	// ErrRateLimited: reason RATE_LIMITED.
	ErrRateLimited = errors.New("rate limited")
	// ErrStoreFull: reason STORE_FULL, the server's storage is out of
	// space and the Append was not stored; it needs an operator, not a
	// resend.
	ErrStoreFull = errors.New("server storage full")
	// ErrScanInterrupted: reason SCAN_INTERRUPTED; Scan resumes by itself
	// until its retry budget is spent.
	ErrScanInterrupted = errors.New("scan interrupted")
	// ErrDataLoss: DATA_LOSS, stored bytes failed their checksum.
	ErrDataLoss = errors.New("data loss")
	// ErrInternal: INTERNAL, a bug in rolloutd (or UNKNOWN).
	ErrInternal = errors.New("internal error")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("client closed")
)

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
	case ErrNotFound:
		return e.Code == codes.NotFound
	case ErrAlreadyExists:
		return e.Code == codes.AlreadyExists
	case ErrInvalidArgument:
		return e.Code == codes.InvalidArgument
	case ErrPermissionDenied:
		return e.Code == codes.PermissionDenied
	case ErrUnauthenticated:
		return e.Code == codes.Unauthenticated
	case ErrTooLarge:
		return e.Reason == ReasonTooLarge ||
			(e.Reason == ReasonRateLimited && e.RetryDelay == 0) ||
			(e.Reason == "" && e.Code == codes.ResourceExhausted)
	case ErrUnavailable:
		return e.Code == codes.Unavailable
	case ErrOutcomeUnknown:
		return e.Reason == ReasonOutcomeUnknown || e.unknown
	case ErrNotCommitted:
		// Not when an earlier attempt of the same Append may have landed.
		return e.Reason == ReasonNotCommitted && !e.unknown
	case ErrBackpressure:
		return e.Reason == ReasonBackpressure
	case ErrRateLimited:
		return e.Reason == ReasonRateLimited
	case ErrStoreFull:
		return e.Reason == ReasonStoreFull
	case ErrScanInterrupted:
		return e.Reason == ReasonScanInterrupted
	case ErrShardDeleted:
		return e.Reason == ReasonShardDeleted
	case ErrSeqMismatch:
		return e.Reason == ReasonSeqMismatch
	case ErrDataLoss:
		return e.Code == codes.DataLoss
	case ErrInternal:
		return e.Code == codes.Internal || e.Code == codes.Unknown
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	case context.Canceled:
		return e.Code == codes.Canceled
	}
	return false
}

// GRPCStatus returns the status the error was decoded from, so that
// status.Code and status.FromError see it.
func (e *Error) GRPCStatus() *status.Status { return e.st }
