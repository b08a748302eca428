package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

func TestToStatus(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("shard %q: something: %w", "s", err) }
	tests := []struct {
		err  error
		code codes.Code
		hint string // the message must contain it
	}{
		{&validate.FieldError{Field: "shard", Rule: "must not be empty"}, codes.InvalidArgument, "shard: must not be empty"},
		{wrap(shard.ErrShardNotFound), codes.NotFound, "shard not found"},
		{wrap(shard.ErrRecordNotFound), codes.NotFound, "record not found"},
		{wrap(shard.ErrIDConflict), codes.AlreadyExists, "different content"},
		{wrap(shard.ErrBackpressure), codes.ResourceExhausted, "retry with the same ids"},
		{wrap(shard.ErrTooLarge), codes.ResourceExhausted, "split the batch"},
		{wrap(ErrLimitExceeded), codes.ResourceExhausted, "split the batch"},
		{fmt.Errorf("%w: blob shards/s/_manifest: bad crc", shard.ErrCorrupt), codes.DataLoss, "shards/s/_manifest"},
		{wrap(context.DeadlineExceeded), codes.DeadlineExceeded, "deadline"},
		{wrap(context.Canceled), codes.Canceled, "canceled"},
		{wrap(&shard.FencedError{Shard: "s", Local: 3, Stored: 4}), codes.Unavailable, "epoch 3 fenced by epoch 4; retry with the same ids"},
		{wrap(shard.ErrAborted), codes.Unavailable, "retry with the same ids"},
		{wrap(shard.ErrClosed), codes.Unavailable, "retry with the same ids"},
		{wrap(shard.ErrOutcomeUnknown), codes.Unavailable, "retry with the same ids"},
		{wrap(blob.ErrUnavailable), codes.Unavailable, "retry with the same ids"},
		{wrap(blob.ErrOutcomeUnknown), codes.Unavailable, "retry with the same ids"},
		{wrap(blob.ErrStoreFailed), codes.Unavailable, "retry with the same ids"},
		{wrap(ErrShuttingDown), codes.Unavailable, "retry with the same ids"},
		{wrap(blob.ErrNotFound), codes.Internal, "unexpected storage not-found"},
		{errors.New("boom"), codes.Internal, "boom"},
		// A deadline that cut off a commit in flight: the client learns the
		// outcome by retrying.
		{fmt.Errorf("append: %w; may still land, retry with the same ids (%w)", context.DeadlineExceeded, shard.ErrOutcomeUnknown), codes.DeadlineExceeded, "retry with the same ids"},
	}
	for _, tt := range tests {
		st := status.Convert(toStatus(tt.err))
		if st.Code() != tt.code || !strings.Contains(st.Message(), tt.hint) {
			t.Errorf("toStatus(%q) = %v %q, want %v containing %q", tt.err, st.Code(), st.Message(), tt.code, tt.hint)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) != nil")
	}
}
