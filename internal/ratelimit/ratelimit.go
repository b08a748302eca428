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
	// What and Unit name a Limiter charged after the fact (NewCost): the
	// call was refused because its identity is in debt.
	What, Unit string
}

func (e *LimitedError) Error() string {
	who := fmt.Sprintf("identity %q", e.Identity)
	if e.Identity == "" {
		who = "this client"
	}
	if e.Unit != "" {
		return fmt.Sprintf("%s rate limit: %s is over %.0f %s/s; retry in %v", e.What, who, e.Rate, e.Unit, e.Retry.Round(time.Millisecond))
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
	rate       rate.Limit
	burst      int
	now        func() time.Time
	what, unit string // NewCost's

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

// NewCost returns a Limiter for calls whose cost is known only once they
// are done, such as the store operations of a listing: Admit refuses a
// call while its identity is in debt, and Charge charges what the call
// cost, into debt if need be. what and unit name it in refusals
// ("listing", "store ops").
func NewCost(what, unit string, perSecond float64, burst int) (*Limiter, error) {
	l, err := New(perSecond, burst)
	if err != nil {
		return nil, err
	}
	l.what, l.unit = what, unit
	return l, nil
}

// Admit returns nil when identity may start a call: its bucket is not in
// debt. Otherwise a *LimitedError says when it will be.
func (l *Limiter) Admit(identity string) error {
	now := l.now()
	tokens := l.bucket(identity, now).TokensAt(now)
	if tokens >= 1 {
		return nil
	}
	retry := time.Duration((1 - tokens) / float64(l.rate) * float64(time.Second))
	return &LimitedError{Identity: identity, Rate: float64(l.rate), Burst: l.burst, Retry: max(retry, time.Millisecond), What: l.what, Unit: l.unit}
}

// Charge takes n from identity's bucket, whatever is left: a call that
// cost more than the bucket held leaves it in debt (at most a burst's
// worth a charge), and its identity's next calls wait it out.
func (l *Limiter) Charge(identity string, n int) {
	if n <= 0 {
		return
	}
	now := l.now()
	b := l.bucket(identity, now)
	for n > 0 {
		// A reservation larger than the burst is refused whole, so
		// charge a burst at a time.
		c := min(n, l.burst)
		b.ReserveN(now, c)
		n -= c
	}
}

// Tokens is what identity's bucket holds now; negative in debt.
func (l *Limiter) Tokens(identity string) float64 {
	now := l.now()
	return l.bucket(identity, now).TokensAt(now)
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
