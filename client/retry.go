package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
)

// RetryPolicy is the retry budget of one call: how many attempts, and how
// long to wait between them.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one call, the first included; 1
	// turns retries off. For Scan it bounds the consecutive failed
	// attempts to resume without receiving anything.
	MaxAttempts int
	// InitialBackoff is the wait before the second attempt; it doubles
	// with each further attempt up to MaxBackoff. Each wait is drawn from
	// [backoff/2, backoff], and is never shorter than the server's
	// RetryInfo delay.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// DefaultRetryPolicy: 5 attempts, 100 ms growing to at most 5 s (about 1.5 s
// of waiting in all when the server sends no RetryInfo).
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}

// DefaultAttemptTimeout bounds one attempt of Append or Get, and the wait
// of a resuming Scan for a connection.
const DefaultAttemptTimeout = 10 * time.Second

// callKind says which rules decide a resend.
type callKind int

const (
	// appendCall resends by the ErrorInfo reason.
	appendCall callKind = iota
	// readCall (Get, Scan) resends whatever is unavailable: a read
	// changes nothing.
	readCall
	// deleteCall (DeleteShard without an expected last seq) resends only
	// what certainly did not take effect: a resend of a delete that landed
	// would delete the shard again if it was written in between, and
	// nothing on the server can tell the two apart.
	deleteCall
	// conditionalDeleteCall (DeleteShard with an expected last seq)
	// resends like a read: a resend cannot delete records appended since,
	// which move the last seq (SEQ_MISMATCH), and a resend that finds its
	// first attempt's tombstone answers already_deleted.
	conditionalDeleteCall
)

// mutates reports whether a call of kind may have changed the shard even
// when it failed, so that an attempt without an answer counts as "may
// have taken effect" (ErrOutcomeUnknown).
func (k callKind) mutates() bool { return k != readCall }

// retryable reports whether the call that failed with e is worth another
// attempt, by its code and ErrorInfo reason alone, never its message. It
// does not look at the call's context; the caller stops when that ends.
func retryable(kind callKind, e *Error) bool {
	switch e.Reason {
	case ReasonOutcomeUnknown, ReasonBackpressure:
		// An Append resent with its request_id learns the outcome.
		return kind == appendCall
	case ReasonNotCommitted:
		// Certainly did not take effect: safe for every call that
		// changes something.
		return kind.mutates()
	case ReasonRateLimited:
		// Without a RetryInfo the call is larger than the limit's burst
		// and never fits.
		return e.RetryDelay > 0
	case ReasonScanInterrupted:
		return kind == readCall
	case "":
		// No reason: the transport's UNAVAILABLE (a connection refused
		// or broken before rolloutd answered), storage unavailable for a
		// read, or an attempt that ran out of its own timeout. For an
		// Append it counts as OUTCOME_UNKNOWN: the same request_id makes
		// the resend safe. For a DeleteShard it may have taken effect:
		// only the expected last seq makes the resend safe.
		if kind == deleteCall {
			return false
		}
		return e.Code == codes.Unavailable || e.Code == codes.DeadlineExceeded
	}
	// TOO_LARGE, STORE_FULL (only an operator freeing space helps), or a
	// reason this client does not know: not a plain resend.
	return false
}

// backoff is the wait before attempt n+1 (n >= 1) with the server's hint
// (its RetryInfo delay, or 0), using rnd for jitter.
func (p RetryPolicy) backoff(n int, hint time.Duration, rnd func(time.Duration) time.Duration) time.Duration {
	b := p.InitialBackoff
	for i := 1; i < n && b < p.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, p.MaxBackoff)
	d := b/2 + rnd(b/2+1)
	if d < hint {
		// The server's delay is a floor; spread the clients that got it.
		d = hint + rnd(hint/5+1)
	}
	return d
}

func jitter(n time.Duration) time.Duration { return rand.N(n) }

// sleep waits d, or until ctx ends; it reports whether the full wait
// passed. A wait that would end past ctx's deadline is not started.
func sleep(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
