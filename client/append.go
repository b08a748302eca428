package client

import (
	"context"

	"github.com/google/uuid"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Append stores records in shard, in order, and returns one result per
// record: its id (the caller's, or one the server derived from the
// request_id), its seq, and already_present when a record with that id
// and the same content was stored before.
//
// The request carries a request_id, a fresh UUIDv4 unless WithRequestID
// names one, and every attempt resends the same request with it (see the
// package comment for which failures are resent). The records are not
// modified. Errors: ErrInvalidArgument (the message names the field),
// ErrAlreadyExists (an id stored with different content), ErrTooLarge,
// ErrPermissionDenied; once the retry budget or ctx is spent, the last
// attempt's error, which matches ErrOutcomeUnknown when the records may
// have been stored (resend with the same request_id to learn the outcome),
// and ErrNotCommitted, ErrBackpressure or ErrRateLimited when they were
// not.
func (c *Client) Append(ctx context.Context, shard string, records []*rolloutv1.Record, opts ...AppendOption) ([]*rolloutv1.AppendResult, error) {
	var o appendConfig
	for _, opt := range opts {
		opt(&o)
	}
	if o.requestID == "" {
		o.requestID = uuid.NewString()
	}
	req := &rolloutv1.AppendRequest{Shard: shard, Records: records, RequestId: o.requestID}
	var resp *rolloutv1.AppendResponse
	err := c.unary(withShard(ctx, shard), appendCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.Append(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetResults(), nil
}
