package client

import (
	"context"
	"iter"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Consumers: the stored positions of a named consumer of a shard prefix
// (docs/api.md, "Consumers"). A consumer is (prefix, name); its positions
// never move backwards but by ResetConsumer.

// CommitConsumer stores positions (shard -> cursor processed up to) for the
// consumer name of prefix; each stored cursor keeps the larger of the two.
// generation, when not 0, is SubscribeStarted.consumer_generation: a
// consumer reset since refuses the commit with ErrConsumerReset. It is
// resent like a read: a resend of a commit that landed changes nothing.
func (c *Client) CommitConsumer(ctx context.Context, prefix, name string, positions map[string]uint64, generation uint64) (*rolloutv1.CommitConsumerResponse, error) {
	var resp *rolloutv1.CommitConsumerResponse
	err := c.unary(ctx, readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: prefix, Consumer: name, Positions: positions, Generation: generation})
		return err
	})
	return resp, err
}

// DescribeConsumer describes the consumer, with its positions when
// positions is set. Errors: ErrNotFound, ErrPermissionDenied, ….
func (c *Client) DescribeConsumer(ctx context.Context, prefix, name string, positions bool) (*rolloutv1.ConsumerInfo, error) {
	var resp *rolloutv1.ConsumerInfo
	err := c.unary(ctx, readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: prefix, Consumer: name, IncludePositions: positions})
		return err
	})
	return resp, err
}

// AllConsumers iterates over the consumers under prefix that the caller
// may scan, page after page. It stops at the first error, which it yields.
func (c *Client) AllConsumers(ctx context.Context, prefix string) iter.Seq2[*rolloutv1.ConsumerInfo, error] {
	return func(yield func(*rolloutv1.ConsumerInfo, error) bool) {
		req := &rolloutv1.ListConsumersRequest{Prefix: prefix}
		for {
			var resp *rolloutv1.ListConsumersResponse
			err := c.unary(ctx, readCall, func(ctx context.Context) error {
				var err error
				resp, err = c.rpc.ListConsumers(ctx, req)
				return err
			})
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

// ResetConsumer moves the consumer's positions (req.To, or exactly
// req.Positions) and starts its next generation. It resends only what
// certainly did not take effect: a resend of a reset that landed would
// start another generation.
func (c *Client) ResetConsumer(ctx context.Context, req *rolloutv1.ResetConsumerRequest) (*rolloutv1.ConsumerInfo, error) {
	var resp *rolloutv1.ResetConsumerResponse
	err := c.unary(ctx, deleteCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.ResetConsumer(ctx, req)
		return err
	})
	return resp.GetConsumer(), err
}

// DeleteConsumer deletes the consumer. Errors: ErrNotFound (also for a
// resend whose first attempt deleted it), …; it resends only what
// certainly did not take effect.
func (c *Client) DeleteConsumer(ctx context.Context, prefix, name string) error {
	return c.unary(ctx, deleteCall, func(ctx context.Context) error {
		_, err := c.rpc.DeleteConsumer(ctx, &rolloutv1.DeleteConsumerRequest{Prefix: prefix, Consumer: name})
		return err
	})
}
