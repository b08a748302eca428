// Package ratelimit bounds the bytes each client identity may append per
// second, with one token bucket (golang.org/x/time/rate) per identity, so
// that one client that writes too much cannot take the storage throughput
// and the shard writers from the others.
//
// A call over the limit is refused at once with how long to wait, never
// queued: a waiting call would hold a connection slot and its memory on
// the server, which is what the limit is there to protect.
package ratelimit

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ErrLimited is what every *LimitedError is.
var ErrLimited = errors.New("append rate limit exceeded")

// LimitedError is a call over its identity's limit.
type LimitedError struct {
	Identity string
	Bytes    int           // the call's size
	Rate     float64       // the limit, bytes per second
	Burst    int           // the bucket's size, bytes
	Retry    time.Duration // when a call of this size will fit; 0 if it never will
}

func (e *LimitedError) Error() string {
	who := fmt.Sprintf("identity %q", e.Identity)
	if e.Identity == "" {
		who = "this client"
	}
	if e.Retry == 0 {
		return fmt.Sprintf("append rate limit: %s may append at most %d bytes at once (%.0f bytes/s), this call has %d: split the batch", who, e.Burst, e.Rate, e.Bytes)
	}
	return fmt.Sprintf("append rate limit: %s is over %.0f bytes/s; retry this call of %d bytes in %v", who, e.Rate, e.Bytes, e.Retry.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *LimitedError) Is(target error) bool { return target == ErrLimited }

// sweepEvery is how many calls pass between sweeps of idle buckets.
const sweepEvery = 4096

// Limiter holds a token bucket per identity. It is safe for concurrent use.
type Limiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	calls   int
}

// New returns a Limiter that lets each identity append bytesPerSecond on
// average, and up to burst bytes at once. burst must be at least the
// largest call it should ever admit.
func New(bytesPerSecond float64, burst int) (*Limiter, error) {
	if bytesPerSecond <= 0 || burst <= 0 {
		return nil, fmt.Errorf("ratelimit: rate (%v) and burst (%d) must be positive", bytesPerSecond, burst)
	}
	return &Limiter{rate: rate.Limit(bytesPerSecond), burst: burst, now: time.Now, buckets: map[string]*rate.Limiter{}}, nil
}

// Take charges n bytes to identity's bucket. It returns nil when they fit,
// and a *LimitedError otherwise, without charging anything: a refused call
// costs its client nothing but the wait.
func (l *Limiter) Take(identity string, n int) error {
	now := l.now()
	b := l.bucket(identity, now)
	r := b.ReserveN(now, n)
	if !r.OK() {
		return &LimitedError{Identity: identity, Bytes: n, Rate: float64(l.rate), Burst: l.burst}
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return &LimitedError{Identity: identity, Bytes: n, Rate: float64(l.rate), Burst: l.burst, Retry: d}
	}
	return nil
}

// bucket returns identity's bucket, making it if needed. Every sweepEvery
// calls it drops the buckets that are full again: a full bucket is the same
// as a new one, so dropping it forgets nothing and keeps memory bounded by
// the identities active in the last few seconds.
func (l *Limiter) bucket(identity string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.calls%sweepEvery == 0 {
		for id, b := range l.buckets {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(l.buckets, id)
			}
		}
	}
	b, ok := l.buckets[identity]
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[identity] = b
	}
	return b
}

// Len is how many identities have a bucket now.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}
