package client

import (
	"context"
	"iter"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Consumers: positions (shard -> cursor) stored under a name within a
// prefix, which a Subscribe with that consumer starts from. A stored
// position never moves backwards, except by ResetConsumer.

// CommitConsumer stores positions (shard -> the cursor processed up to)
// for the consumer name under prefix; a cursor below the stored one keeps
// the stored one. generation, when not 0, is the consumer generation the
// positions belong to (Subscription.ConsumerGeneration): after a reset the
// commit is refused with ErrConsumerReset and stores nothing. The first
// commit creates the consumer.
//
// It is resent as an Append is (OUTCOME_UNKNOWN, NOT_COMMITTED, a broken
// connection, …): a resend of a commit that landed stores nothing new. An
// attempt that may have landed, when the retries run out, matches
// ErrOutcomeUnknown; committing again is safe.
//
// Errors: ErrConsumerReset, ErrInvalidArgument (a name out of grammar, a
// shard not under prefix), ErrPermissionDenied, ErrOutcomeUnknown, ….
func (c *Client) CommitConsumer(ctx context.Context, prefix, name string, positions map[string]uint64, generation uint64) error {
	_, err := c.commitConsumer(ctx, prefix, name, positions, generation)
	return err
}

// commitConsumer is CommitConsumer, and the consumer's generation the
// server answered with.
func (c *Client) commitConsumer(ctx context.Context, prefix, name string, positions map[string]uint64, generation uint64) (uint64, error) {
	req := &rolloutv1.CommitConsumerRequest{Prefix: prefix, Consumer: name, Positions: positions, Generation: generation}
	var resp *rolloutv1.CommitConsumerResponse
	err := c.unary(ctx, commitCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.CommitConsumer(ctx, req)
		return err
	})
	return resp.GetGeneration(), err
}

// DescribeConsumer returns the consumer's generation, lag and, with
// withPositions, its positions. Errors: ErrNotFound (never committed, or
// deleted), ErrPermissionDenied, ….
func (c *Client) DescribeConsumer(ctx context.Context, prefix, name string, withPositions bool) (*rolloutv1.ConsumerInfo, error) {
	req := &rolloutv1.DescribeConsumerRequest{Prefix: prefix, Consumer: name, IncludePositions: withPositions}
	var resp *rolloutv1.ConsumerInfo
	err := c.unary(ctx, readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.DescribeConsumer(ctx, req)
		return err
	})
	return resp, err
}

// ListConsumers returns one page of the consumers whose prefix lies under
// req.Prefix, without positions and lag, as ListShards does for shards.
func (c *Client) ListConsumers(ctx context.Context, req *rolloutv1.ListConsumersRequest) (*rolloutv1.ListConsumersResponse, error) {
	var resp *rolloutv1.ListConsumersResponse
	err := c.unary(ctx, readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.ListConsumers(ctx, req)
		return err
	})
	return resp, err
}

// AllConsumers iterates over every consumer under prefix that the caller
// may scan, page after page. It stops at the first error, which it yields.
func (c *Client) AllConsumers(ctx context.Context, prefix string) iter.Seq2[*rolloutv1.ConsumerInfo, error] {
	return func(yield func(*rolloutv1.ConsumerInfo, error) bool) {
		req := &rolloutv1.ListConsumersRequest{Prefix: prefix}
		for {
			resp, err := c.ListConsumers(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, ci := range resp.GetConsumers() {
				if !yield(ci, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}

// ResetConsumer moves the consumer's positions, backwards included, and
// starts its next generation, so that members still running on the old
// positions have their commits refused (ErrConsumerReset) instead of
// undoing the reset. to is StartEarliest (drop every position),
// StartLatest (each shard's last seq now), or StartDefault with positions:
// exactly those. A consumer that does not exist is created. It returns the
// consumer with its new generation and positions.
//
// It resends only what certainly did not take effect (NOT_COMMITTED): a
// resend of a reset that landed would start another generation, and
// refuse the commits of a subscription started from the first. An attempt
// that may have landed matches ErrOutcomeUnknown: describe the consumer to
// learn where it is.
func (c *Client) ResetConsumer(ctx context.Context, prefix, name string, to SubscribeStart, positions map[string]uint64) (*rolloutv1.ConsumerInfo, error) {
	req := &rolloutv1.ResetConsumerRequest{Prefix: prefix, Consumer: name, To: rolloutv1.SubscribeStart(to), Positions: positions}
	var resp *rolloutv1.ResetConsumerResponse
	err := c.unary(ctx, deleteCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.ResetConsumer(ctx, req)
		return err
	})
	return resp.GetConsumer(), err
}

// DeleteConsumer deletes the consumer and its positions. Like DeleteShard
// without an expected last seq, it is resent only on what certainly did
// not take effect (NOT_COMMITTED): a resend of a delete that landed would
// answer NOT_FOUND, or delete the consumer a commit made since. An attempt
// that may have landed matches ErrOutcomeUnknown; delete again, and take
// ErrNotFound as done. Errors: ErrNotFound, ErrPermissionDenied, ….
func (c *Client) DeleteConsumer(ctx context.Context, prefix, name string) error {
	req := &rolloutv1.DeleteConsumerRequest{Prefix: prefix, Consumer: name}
	return c.unary(ctx, deleteCall, func(ctx context.Context) error {
		_, err := c.rpc.DeleteConsumer(ctx, req)
		return err
	})
}
