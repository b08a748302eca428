package shardlog

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/rolloutd/rolloutd/internal/clock"
)

// Backoff spaces out retries of one operation: jittered, doubling, capped
// at 32 times the first delay.
type Backoff struct {
	clock clock.Clock
	next  time.Duration
	max   time.Duration
}

// NewBackoff returns a Backoff whose first delay is about first, timed by c.
func NewBackoff(c clock.Clock, first time.Duration) *Backoff {
	return &Backoff{clock: c, next: first, max: 32 * first}
}

// Wait sleeps for the next delay, or returns ctx's error.
func (b *Backoff) Wait(ctx context.Context) error {
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
