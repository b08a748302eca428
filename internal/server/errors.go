package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/consumer"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
	shardfollow "github.com/rolloutd/rolloutd/internal/shard/follow"
	"github.com/rolloutd/rolloutd/internal/shard/subscribe"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// ErrLimitExceeded: a request is over one of the server's configured limits
// (records per batch, bytes per record). Errors of this class are
// *LimitError values.
var ErrLimitExceeded = errors.New("request over the server's limit")

// LimitError is a request that is too big in itself: no retry of it can
// succeed, only a smaller request.
type LimitError struct {
	// Field is the request field over the limit: "records" for the batch,
	// "records[3]" for one record.
	Field string
	// Detail says what is over which limit, naming the field.
	Detail string
	// Hint says what the caller can do instead, starting with "; ". Empty
	// means "; split the batch", which cannot help a single record.
	Hint string
}

func (e *LimitError) Error() string { return ErrLimitExceeded.Error() + ": " + e.Detail }

// Is makes errors.Is(err, ErrLimitExceeded) true for a *LimitError.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// ErrorDomain is the domain of every google.rpc.ErrorInfo rolloutd sends.
const ErrorDomain = "rolloutd.io"

// MetadataLastSeq is the ErrorInfo metadata key of a SEQ_MISMATCH's
// current last seq, in decimal.
const MetadataLastSeq = "last_seq"

// MetadataGeneration is the ErrorInfo metadata key of a CONSUMER_RESET's
// current consumer generation, in decimal (0: the consumer was deleted).
const MetadataGeneration = "generation"

// MetadataResumeAfterSeq is the ErrorInfo metadata key of a Scan's resume
// cursor: the after_seq to send in the next Scan, in decimal.
const MetadataResumeAfterSeq = "resume_after_seq"

// Retry delays sent as google.rpc.RetryInfo. They are floors a client
// should wait before resending, and add its own jitter and growth to.
const (
	// backpressureRetry: a full queue drains one generation per commit, a
	// generation PUT and a manifest CAS of tens of milliseconds each on
	// Azure. A resend sooner than a few commits would most likely find the
	// queue still full and only add load to the instance that is behind.
	backpressureRetry = 200 * time.Millisecond
	// notCommittedRetry: the server has already retried a fenced, aborted
	// or closed writer on a fresh one, with a short backoff (RetryBackoff,
	// 10 ms growing); a shutting-down instance needs a moment before the
	// client's channel moves to another; throttled storage needs a
	// moment. An immediate resend would most likely meet the same cause.
	notCommittedRetry = 100 * time.Millisecond
	// outcomeUnknownRetry: the server gave up on a commit it sent (its
	// CommitTimeout passed, or storage cut the answer off) and has stopped
	// that writer; the resend that settles the outcome needs a replacement
	// writer, whose open backs off while storage keeps failing.
	outcomeUnknownRetry = 100 * time.Millisecond
)

// Hints that end a message, saying what the reason means in words.
const (
	hintOutcomeUnknown = "; it may have been stored: retry with the same ids or request_id to learn the outcome"
	hintNotCommitted   = "; not stored, safe to retry"
	hintNotSent        = "; the append was not sent, so not stored: safe to retry"
)

// toStatus maps an error of a call that writes nothing (Get, Scan, and the
// refusals of the guard) to the error the client gets. Append's write maps
// through appendStatus. Both go through classify, the one place where the
// mapping lives. ctx is the RPC's context: only its end makes an error
// DEADLINE_EXCEEDED or CANCELLED.
//
// The error is a gRPC status, or an *internalError for a failure whose text
// is withheld from the client (see internalError).
func toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return classify(ctx, err, false).err()
}

// appendStatus maps an error of Append's write (the writer set and the
// shard's writer) to the error the client gets, like toStatus. Unlike a
// read's, its storage and context errors carry NOT_COMMITTED: the shard
// layer reports every failure after which an attempt may have landed with
// ErrOutcomeUnknown, so any other failure stored nothing.
func appendStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return classify(ctx, err, true).err()
}

// failure is a classified error: the status and the details a client acts
// on.
type failure struct {
	code codes.Code
	// msg is the error's own text, which names the shard, the field or
	// the blob involved.
	msg string
	// hint says what the reason means, in words: "; not stored, safe to
	// retry". It never carries the server's internals.
	hint string
	// internal: msg may carry the server's internals (absolute file paths,
	// the storage endpoint, account, container and prefix). The client
	// gets a generic text and the RPC's request id instead, and msg goes
	// to the log under that id. Set for Internal, DataLoss and
	// storage-caused Unavailable.
	internal bool
	// reason is the ErrorInfo reason; ERROR_REASON_UNSPECIFIED sends no
	// ErrorInfo.
	reason   rolloutv1.ErrorReason
	metadata map[string]string
	// retry > 0 sends a RetryInfo with that delay.
	retry time.Duration
	// field, when set, sends a BadRequest naming it: the request itself
	// must change.
	field, fieldDesc string
}

// classify maps err, which ended the RPC whose context is ctx, to its
// failure. write says whether err ended a call that writes (Append), which
// decides whether a storage or context error proves that nothing was
// stored. It classifies with errors.Is only, so wrapped errors keep their
// class. The message is the error's own text, which names the shard, the
// field or the blob involved, and a hint.
//
// DEADLINE_EXCEEDED and CANCELLED say that the call itself ended: its
// deadline (the client's, or the server's default) passed, or it was
// cancelled. They are read from ctx, never from err, which may wrap a
// timeout of the server's own (CommitTimeout, the open timeout, a storage
// try) under a deadline that is still far: that is UNAVAILABLE, and
// retrying at once is useful.
func classify(ctx context.Context, err error, write bool) failure {
	f := classifyCode(ctx.Err(), err, write)
	switch f.code {
	case codes.Internal, codes.DataLoss:
		f.internal = true
	case codes.Unavailable:
		// A timeout of the server's own may name a blob inside the store.
		f.internal = storageCaused(err) ||
			(ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)))
	}
	return f
}

// storageCaused reports whether an Unavailable err comes from the blob
// store (the Azure backend and the local store report storage that failed
// or could not be reached with these classes), as opposed to fencing, a
// closed writer or a shutdown, whose texts stay helpful.
func storageCaused(err error) bool {
	return errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrStoreFailed) ||
		errors.Is(err, blob.ErrOutcomeUnknown)
}

// classifyCode decides the code, the client-facing texts and the details of
// err, given ended, the RPC context's error (nil while it runs); classify
// then marks which failures withhold their text. The classes are tried in
// order (classifyCode's outcome-unknown first, then classifyRequest's, then
// classifyResources', then the rest): an error that wraps several classes
// gets the first one's failure.
func classifyCode(ended, err error, write bool) failure {
	msg := err.Error()
	// First: an outcome-unknown error may also wrap a context error or a
	// storage class, and must never read as "not committed".
	if errors.Is(err, shard.ErrOutcomeUnknown) || errors.Is(err, blob.ErrOutcomeUnknown) {
		if code, ok := endedCode(ended); ok {
			return failure{code: code, msg: msg, hint: hintOutcomeUnknown, reason: rolloutv1.ErrorReason_OUTCOME_UNKNOWN}
		}
		return failure{code: codes.Unavailable, msg: msg, hint: hintOutcomeUnknown, reason: rolloutv1.ErrorReason_OUTCOME_UNKNOWN, retry: outcomeUnknownRetry}
	}
	if f, ok := classifyRequest(err, msg); ok {
		return f
	}
	if f, ok := classifyResources(err, msg); ok {
		return f
	}
	switch {
	case errors.Is(err, shard.ErrCorrupt), errors.Is(err, consumer.ErrCorrupt):
		return failure{code: codes.DataLoss, msg: msg}

	case ended != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		code, _ := endedCode(ended)
		f := failure{code: code, msg: msg}
		if write {
			f.hint = hintNotSent
			f.reason = rolloutv1.ErrorReason_NOT_COMMITTED
		}
		return f
	case
		// A timeout or cancellation of the server's own, inside a call
		// that still runs: the service is unavailable for now.
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, shard.ErrFenced),
		errors.Is(err, shard.ErrAborted),
		errors.Is(err, shard.ErrClosed),
		errors.Is(err, shard.ErrStale),
		errors.Is(err, blob.ErrUnavailable),
		// A store that failed for good (a failed fsync) serves again
		// after a restart, which a retry with the same ids then meets.
		errors.Is(err, blob.ErrStoreFailed),
		errors.Is(err, ErrShuttingDown),
		// The subscriptions' engine and reader set close at shutdown.
		errors.Is(err, subscribe.ErrClosed),
		errors.Is(err, shardfollow.ErrClosed):
		if !write {
			return failure{code: codes.Unavailable, msg: msg, hint: "; retry"}
		}
		return failure{code: codes.Unavailable, msg: msg, hint: hintNotCommitted, reason: rolloutv1.ErrorReason_NOT_COMMITTED, retry: notCommittedRetry}

	case errors.Is(err, blob.ErrNotFound):
		// The reader turns a missing manifest or record into its own
		// sentinels; a storage not-found that leaks through is a bug or
		// a storage inconsistency, never the client's NotFound.
		return failure{code: codes.Internal, msg: "unexpected storage not-found: " + msg}

	default:
		return failure{code: codes.Internal, msg: msg}
	}
}

// classifyRequest classifies the errors that are about the request itself
// (its fields, the shard and the ids it names, the caller's permission),
// for classifyCode; false for any other error.
func classifyRequest(err error, msg string) (failure, bool) {
	switch {
	case errors.Is(err, validate.ErrInvalid):
		return failure{code: codes.InvalidArgument, msg: msg}, true

	case errors.Is(err, shard.ErrShardDeleted):
		return failure{code: codes.NotFound, msg: msg, reason: rolloutv1.ErrorReason_SHARD_DELETED}, true
	case errors.Is(err, shard.ErrShardNotFound), errors.Is(err, shard.ErrRecordNotFound):
		return failure{code: codes.NotFound, msg: msg}, true
	case errors.Is(err, shard.ErrSeqMismatch):
		f := failure{code: codes.FailedPrecondition, msg: msg, reason: rolloutv1.ErrorReason_SEQ_MISMATCH}
		var sm *shard.SeqMismatchError
		if errors.As(err, &sm) {
			f.metadata = map[string]string{MetadataLastSeq: strconv.FormatUint(sm.LastSeq, 10)}
		}
		return f, true
	case errors.Is(err, shard.ErrBadPageToken), errors.Is(err, consumer.ErrBadPageToken):
		return failure{code: codes.InvalidArgument, msg: msg}, true
	case errors.Is(err, subscribe.ErrConsumerNotFound):
		return failure{code: codes.NotFound, msg: msg, hint: "; start with SUBSCRIBE_START_UNSPECIFIED to read from the first records until it commits"}, true
	case errors.Is(err, subscribe.ErrConsumersUnavailable):
		return failure{code: codes.FailedPrecondition, msg: msg}, true

	case errors.Is(err, consumer.ErrNotFound):
		return failure{code: codes.NotFound, msg: msg}, true
	case errors.Is(err, consumer.ErrReset):
		f := failure{code: codes.FailedPrecondition, msg: msg, reason: rolloutv1.ErrorReason_CONSUMER_RESET}
		var re *consumer.ResetError
		if errors.As(err, &re) {
			f.metadata = map[string]string{MetadataGeneration: strconv.FormatUint(re.Generation, 10)}
		}
		return f, true
	case errors.Is(err, consumer.ErrTooManyPositions):
		// The consumer holds, or would hold, more shards than one blob
		// keeps: no retry helps, only consumers of narrower prefixes.
		return failure{code: codes.FailedPrecondition, msg: msg, field: "positions", fieldDesc: msg}, true

	case errors.Is(err, shard.ErrIDConflict):
		return failure{code: codes.AlreadyExists, msg: msg}, true

	case errors.Is(err, authz.ErrDenied):
		return failure{code: codes.PermissionDenied, msg: msg}, true
	}
	return failure{}, false
}

// classifyResources classifies the errors of a request over a limit or a
// resource (the rate limit, the writer's queue, the memory budget, the size
// limits, the storage's space), for classifyCode: RESOURCE_EXHAUSTED, each
// with its reason. False for any other error.
func classifyResources(err error, msg string) (failure, bool) {
	switch {
	case errors.Is(err, ratelimit.ErrLimited):
		f := failure{code: codes.ResourceExhausted, msg: msg, reason: rolloutv1.ErrorReason_RATE_LIMITED}
		var le *ratelimit.LimitedError
		if errors.As(err, &le) && le.Retry > 0 {
			f.retry = le.Retry
		} else {
			// Larger than the bucket: it never fits.
			f.field, f.fieldDesc = "records", msg
		}
		return f, true

	case errors.Is(err, shard.ErrBackpressure):
		return failure{code: codes.ResourceExhausted, msg: msg, hint: "; back off, then retry", reason: rolloutv1.ErrorReason_BACKPRESSURE, retry: backpressureRetry}, true
	case errors.Is(err, ErrOverBudget):
		return failure{code: codes.ResourceExhausted, msg: msg, hint: "; back off, then retry", reason: rolloutv1.ErrorReason_BACKPRESSURE, retry: overBudgetRetry}, true
	case errors.Is(err, shard.ErrTooLarge), errors.Is(err, ErrLimitExceeded):
		f := failure{code: codes.ResourceExhausted, msg: msg, hint: "; split the batch", reason: rolloutv1.ErrorReason_TOO_LARGE, field: "records", fieldDesc: msg}
		var le *LimitError
		if errors.As(err, &le) {
			f.field, f.fieldDesc = le.Field, le.Detail
			if le.Hint != "" {
				f.hint = le.Hint
			}
		}
		return f, true

	case errors.Is(err, blob.ErrNoSpace):
		// Its text names files of the data directory: withheld.
		return failure{code: codes.ResourceExhausted, msg: msg, hint: "; not stored: the server's data volume needs free space", reason: rolloutv1.ErrorReason_STORE_FULL, internal: true}, true
	}
	return failure{}, false
}

// endedCode is the code of a call that ended, given its context's error:
// DEADLINE_EXCEEDED when its deadline passed, CANCELLED when it was
// cancelled; false while it runs.
func endedCode(ended error) (codes.Code, bool) {
	switch {
	case errors.Is(ended, context.DeadlineExceeded):
		return codes.DeadlineExceeded, true
	case ended != nil:
		return codes.Canceled, true
	}
	return codes.OK, false
}

// Generic texts of the failures whose own text is withheld.
var genericText = map[codes.Code]string{
	codes.Internal:          "internal error",
	codes.DataLoss:          "stored data failed verification",
	codes.Unavailable:       "storage unavailable",
	codes.ResourceExhausted: "storage full",
}

// message is the status message of f for the RPC with requestID ("" when
// unknown). An internal failure's is a generic text, its hint, and the
// request id under which the server logged the details.
func (f failure) message(requestID string) string {
	if !f.internal {
		return truncate(f.msg+f.hint, maxStatusMessage)
	}
	text := genericText[f.code]
	if text == "" {
		text = "error"
	}
	text += f.hint
	if requestID != "" {
		text += "; the server logged the details under request id " + requestID
	}
	return text
}

// err is f as the error a handler returns: its gRPC status, or for an
// internal failure an *internalError, which the outermost interceptor
// answers with the generic text and the request id.
func (f failure) err() error {
	if f.internal {
		return &internalError{f: f}
	}
	return f.status("").Err()
}

// status builds the gRPC status of f, with its details, for the RPC with
// requestID.
func (f failure) status(requestID string) *status.Status {
	st := status.New(f.code, f.message(requestID))
	var details []protoadapt.MessageV1
	if f.reason != rolloutv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		details = append(details, &errdetails.ErrorInfo{Reason: f.reason.String(), Domain: ErrorDomain, Metadata: f.metadata})
	}
	if f.retry > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(f.retry)})
	}
	if f.field != "" && !f.internal {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: truncate(f.field, maxLoggedClientString), Description: truncate(f.fieldDesc, maxStatusMessage)},
		}})
	}
	if len(details) == 0 {
		return st
	}
	withDetails, err := st.WithDetails(details...)
	if err != nil {
		return st
	}
	return withDetails
}

// internalError is a failure whose own text is withheld from the client:
// it may carry file paths or the storage endpoint, account, container and
// prefix. The outermost interceptor (Server.answer) sends the client the
// generic text with the RPC's request id, the reason and the retry advice,
// and logs the text under that id.
//
// Until then it reads as that generic status without a request id, as an
// error and as a gRPC status, so that no path can leak the text by
// skipping the interceptor.
type internalError struct{ f failure }

func (e *internalError) Error() string { return e.f.message("") }

// GRPCStatus makes status.FromError see the generic status.
func (e *internalError) GRPCStatus() *status.Status { return e.f.status("") }

// detail is the withheld text.
func (e *internalError) detail() string { return e.f.msg }

// resumeAt makes f, the failure of a Scan that ended after its request
// was accepted, carry the cursor to resume from as ErrorInfo metadata when a
// new Scan gets past the cause. The message keeps the cursor too, for
// people; clients read the metadata.
func (f failure) resumeAt(cursor uint64) failure {
	switch f.code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		f.reason = rolloutv1.ErrorReason_SCAN_INTERRUPTED
		f.metadata = map[string]string{MetadataResumeAfterSeq: strconv.FormatUint(cursor, 10)}
	}
	return f
}
