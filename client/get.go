package client

import (
	"context"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Get reads the record with id from shard, as committed: its seq and
// created_at filled in. It resends on UNAVAILABLE and on an attempt's
// timeout, within the retry budget. Errors: ErrNotFound (no such shard or
// id), ErrInvalidArgument, ErrPermissionDenied, ErrUnavailable,
// ErrDataLoss.
func (c *Client) Get(ctx context.Context, shard, id string) (*rolloutv1.Record, error) {
	req := &rolloutv1.GetRequest{Shard: shard, Id: id}
	var resp *rolloutv1.GetResponse
	err := c.unary(withShard(ctx, shard), readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.Get(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetRecord(), nil
}
