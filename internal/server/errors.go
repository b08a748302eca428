package server

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// ErrLimitExceeded: a request is over one of the server's configured limits
// (records per batch, bytes per record).
var ErrLimitExceeded = errors.New("request over the server's limit")

// retryHint ends the message of every error after which the client should
// retry the same request: the ids it carries make a retry safe.
const retryHint = "; retry with the same ids"

// toStatus maps an error of the service to the gRPC status the client gets.
// It is the one place where that mapping lives, and it classifies with
// errors.Is only, so wrapped errors keep their class. The message is the
// error's own text, which names the shard, the field or the blob involved.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case errors.Is(err, validate.ErrInvalid):
		return status.Error(codes.InvalidArgument, msg)

	case errors.Is(err, shard.ErrShardNotFound), errors.Is(err, shard.ErrRecordNotFound):
		return status.Error(codes.NotFound, msg)

	case errors.Is(err, shard.ErrIDConflict):
		return status.Error(codes.AlreadyExists, msg)

	case errors.Is(err, authz.ErrDenied):
		return status.Error(codes.PermissionDenied, msg)
	case errors.Is(err, ratelimit.ErrLimited):
		return rateLimited(err)

	case errors.Is(err, shard.ErrBackpressure):
		return status.Error(codes.ResourceExhausted, msg+"; back off, then retry with the same ids")
	case errors.Is(err, shard.ErrTooLarge), errors.Is(err, ErrLimitExceeded):
		return status.Error(codes.ResourceExhausted, msg+"; split the batch")

	case errors.Is(err, shard.ErrCorrupt):
		return status.Error(codes.DataLoss, msg)

	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, msg)

	case errors.Is(err, shard.ErrFenced),
		errors.Is(err, shard.ErrAborted),
		errors.Is(err, shard.ErrClosed),
		errors.Is(err, shard.ErrOutcomeUnknown),
		errors.Is(err, blob.ErrUnavailable),
		errors.Is(err, blob.ErrOutcomeUnknown),
		// A store that failed for good (a failed fsync) serves again
		// after a restart, which a retry with the same ids then meets.
		errors.Is(err, blob.ErrStoreFailed),
		errors.Is(err, ErrShuttingDown):
		return status.Error(codes.Unavailable, msg+retryHint)

	case errors.Is(err, blob.ErrNotFound):
		// The reader turns a missing manifest or record into its own
		// sentinels; a storage not-found that leaks through is a bug or
		// a storage inconsistency, never the client's NotFound.
		return status.Error(codes.Internal, "unexpected storage not-found: "+msg)

	default:
		return status.Error(codes.Internal, msg)
	}
}

// rateLimited is ResourceExhausted for a call over its append rate limit,
// with a google.rpc.RetryInfo detail that says when the same call will
// fit. A call that never fits (larger than the burst) has no RetryInfo: it
// must be split.
func rateLimited(err error) error {
	var le *ratelimit.LimitedError
	st := status.New(codes.ResourceExhausted, err.Error())
	if !errors.As(err, &le) || le.Retry <= 0 {
		return st.Err()
	}
	withInfo, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(le.Retry)})
	if derr != nil {
		return st.Err()
	}
	return withInfo.Err()
}
