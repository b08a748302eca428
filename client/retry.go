package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
)

// RetryPolicy is the retry budget of one call: how many attempts, and how
// long to wait between them. The whole policy, with the call's time budget
// and the connection's reconnect backoff, is written once for the Go and
// the Python client in docs/clients.md.
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

// DefaultRetryPolicy: 8 attempts, waits of 100 ms doubling to at most 2 s.
// With the server down a call fails after 3.55 s to 7.1 s of waiting
// (docs/clients.md), the same in the Python client.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 8, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}

// DefaultAttemptTimeout bounds one attempt of a unary call, and the wait
// of a resuming Scan for its stream to open.
const DefaultAttemptTimeout = 10 * time.Second

// DefaultCallTimeout is the time budget of a unary call whose context has
// no deadline, every attempt and wait included; a context's deadline
// replaces it. For Scan it bounds the resumes after one break.
const DefaultCallTimeout = 30 * time.Second

// reconnect is the connection's own backoff between attempts to connect.
// gRPC's default starts at 1 s and grows to 120 s, and while it runs a
// connection in TRANSIENT_FAILURE fails every attempt at once: a server
// back after a restart would not be reached within a call's budget.
// Capped at 1 s, a restarted server is reached within about 1.2 s (with
// jitter) of listening. The Python client sets the same numbers (grpc's
// C core has the same multiplier and jitter).
var reconnect = grpc.ConnectParams{
	Backoff: backoff.Config{
		BaseDelay:  100 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   time.Second,
	},
	// gRPC's default, set because a zero here would bound a connection
	// attempt (TLS handshake included) by the backoff alone.
	MinConnectTimeout: 20 * time.Second,
}

// callKind says which rules decide a resend.
type callKind int

const (
	// appendCall resends by the ErrorInfo reason.
	appendCall callKind = iota
	// readCall (Get, Scan) resends whatever is unavailable: a read
	// changes nothing.
	readCall
	// deleteCall (DeleteShard without an expected last seq, and
	// DeleteConsumer) resends only what certainly did not take effect: a
	// resend of a delete that landed would delete the shard (or consumer)
	// again if it was written in between, and nothing on the server can
	// tell the two apart. ResetConsumer resends as it does: a resend of a
	// reset that landed would start another generation.
	deleteCall
	// conditionalDeleteCall (DeleteShard with an expected last seq)
	// resends like a read: a resend cannot delete records appended since,
	// which move the last seq (SEQ_MISMATCH), and a resend that finds its
	// first attempt's tombstone answers already_deleted.
	conditionalDeleteCall
	// commitCall (CommitConsumer) resends as an Append does: a resend of a
	// commit that landed stores nothing new, because a stored position
	// never moves backwards.
	commitCall
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
		// An Append resent with its request_id learns the outcome; a
		// commit resent stores the same positions.
		return kind == appendCall || kind == commitCall
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

// pause waits d before the next attempt, or until ctx ends; it reports
// whether the next attempt should go ahead. A wait that would end past
// ctx's deadline is not started. After an attempt that got no answer
// (transport: UNAVAILABLE without a reason) it ends early, once the
// connection is READY again, but not before d/10: a connection in
// TRANSIENT_FAILURE fails attempts at once until its reconnect succeeds,
// and a server that restarts should be reached as soon as it listens.
func (c *Client) pause(ctx context.Context, d time.Duration, transport bool) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	if !transport {
		return sleep(ctx, d)
	}
	if !sleep(ctx, d/10) {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, d-d/10)
	defer cancel()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return true
		}
		if s == connectivity.Idle {
			c.conn.Connect()
		}
		if !c.conn.WaitForStateChange(wctx, s) {
			return ctx.Err() == nil
		}
	}
}

// transportFailure reports whether e is a failure without an answer from
// rolloutd: UNAVAILABLE without a reason (a connection refused, broken or
// not yet made). A read's storage UNAVAILABLE looks the same; the
// connection's state tells them apart in giveUp.
func transportFailure(e *Error) bool { return e.Code == codes.Unavailable && e.Reason == "" }

// giveUp completes e, the last failure of a call that made its attempts
// over the time since start: a transport failure while the connection is
// not READY says the server is unreachable.
func (c *Client) giveUp(e *Error, start time.Time) *Error {
	e.Elapsed = time.Since(start)
	if transportFailure(e) && c.conn.GetState() != connectivity.Ready {
		e.unreachable = c.target
	}
	return e
}
