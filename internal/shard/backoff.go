package shard

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/rolloutd/rolloutd/internal/clock"
)

// backoff spaces out retries of one operation: jittered, doubling, capped.
type backoff struct {
	clock clock.Clock
	next  time.Duration
	max   time.Duration
}

func newBackoff(o Options) *backoff {
	return &backoff{clock: o.Clock, next: o.RetryBackoff, max: 32 * o.RetryBackoff}
}

// wait sleeps for the next delay, or returns ctx's error.
func (b *backoff) wait(ctx context.Context) error {
	d := b.next/2 + rand.N(b.next/2+1)
	if b.next *= 2; b.next > b.max {
		b.next = b.max
	}
	select {
	case <-b.clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
