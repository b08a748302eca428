package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// statusDetails are the details of a status a client acts on.
type statusDetails struct {
	info  *errdetails.ErrorInfo
	retry *errdetails.RetryInfo
	bad   *errdetails.BadRequest
	other []any
}

// detailsOf splits st's details by type; more than one of a type is an
// error.
func detailsOf(t testing.TB, st *status.Status) statusDetails {
	t.Helper()
	var d statusDetails
	for _, x := range st.Details() {
		switch x := x.(type) {
		case *errdetails.ErrorInfo:
			if d.info != nil {
				t.Errorf("%v: two ErrorInfo", st)
			}
			d.info = x
		case *errdetails.RetryInfo:
			if d.retry != nil {
				t.Errorf("%v: two RetryInfo", st)
			}
			d.retry = x
		case *errdetails.BadRequest:
			if d.bad != nil {
				t.Errorf("%v: two BadRequest", st)
			}
			d.bad = x
		default:
			d.other = append(d.other, x)
		}
	}
	return d
}

// reason is the ErrorInfo reason of d, or "" without one. It checks the
// domain.
func (d statusDetails) reason(t testing.TB) string {
	t.Helper()
	if d.info == nil {
		return ""
	}
	if d.info.GetDomain() != ErrorDomain {
		t.Errorf("ErrorInfo domain %q, want %q", d.info.GetDomain(), ErrorDomain)
	}
	return d.info.GetReason()
}

// badField is the one field d's BadRequest names, or "" without one.
func (d statusDetails) badField(t testing.TB) string {
	t.Helper()
	if d.bad == nil {
		return ""
	}
	if len(d.bad.GetFieldViolations()) != 1 {
		t.Errorf("BadRequest %v, want one field violation", d.bad)
		return ""
	}
	v := d.bad.GetFieldViolations()[0]
	if v.GetDescription() == "" {
		t.Errorf("BadRequest on %q has no description", v.GetField())
	}
	return v.GetField()
}

// Every class of error maps to its code, keeps its text with the hint for
// its reason, and carries exactly the details a client acts on: the reason,
// a RetryInfo only where waiting helps, a BadRequest only where the request
// itself must change. A write (Append) and a read map storage and context
// errors differently: only a write can be "not committed".
func TestToStatus(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("shard %q: something: %w", "s", err) }
	fenced := wrap(&shard.FencedError{Shard: "s", Local: 3, Stored: 4})
	// A deadline that cut off a commit in flight, as the writer reports it.
	cutOff := fmt.Errorf("append: %w; may still land (%w)", context.DeadlineExceeded, shard.ErrOutcomeUnknown)
	tests := []struct {
		name   string
		err    error
		write  bool  // through appendStatus, not toStatus
		ended  error // the RPC context's error: nil while the call runs
		code   codes.Code
		hint   string        // the message must contain it
		reason string        // "" for no ErrorInfo
		retry  time.Duration // 0 for no RetryInfo
		field  string        // "" for no BadRequest
		// internal: the client gets a generic text, and the error's own
		// text only reaches the log.
		internal bool
	}{
		{"invalid", &validate.FieldError{Field: "shard", Rule: "must not be empty"}, true, nil, codes.InvalidArgument, "shard: must not be empty", "", 0, "", false},
		{"no shard", wrap(shard.ErrShardNotFound), false, nil, codes.NotFound, "shard not found", "", 0, "", false},
		{"no record", wrap(shard.ErrRecordNotFound), false, nil, codes.NotFound, "record not found", "", 0, "", false},
		{"id conflict", wrap(shard.ErrIDConflict), true, nil, codes.AlreadyExists, "different content", "", 0, "", false},
		{"corrupt", fmt.Errorf("%w: blob shards/s/_manifest: bad crc", shard.ErrCorrupt), false, nil, codes.DataLoss, "stored data failed verification", "", 0, "", true},
		{"storage not-found", wrap(blob.ErrNotFound), true, nil, codes.Internal, "internal error", "", 0, "", true},
		{"unclassified", errors.New("boom"), true, nil, codes.Internal, "internal error", "", 0, "", true},

		{"backpressure", wrap(shard.ErrBackpressure), true, nil, codes.ResourceExhausted, "queue full; back off, then retry", rolloutv1.ErrorReason_BACKPRESSURE.String(), backpressureRetry, "", false},
		{"batch over the generation limit", wrap(shard.ErrTooLarge), true, nil, codes.ResourceExhausted, "split the batch", rolloutv1.ErrorReason_TOO_LARGE.String(), 0, "records", false},
		{"batch over the record count", &LimitError{Field: "records", Detail: "the batch has 9 records, the server takes at most 3 per Append"}, true, nil, codes.ResourceExhausted, "request over the server's limit: the batch has 9 records, the server takes at most 3 per Append; split the batch", rolloutv1.ErrorReason_TOO_LARGE.String(), 0, "records", false},
		{"record over the limit", wrap(&LimitError{Field: "records[3]", Detail: "records[3] encodes to 9 bytes, the server takes at most 5 per record", Hint: hintRecordTooLarge}), true, nil, codes.ResourceExhausted, "records[3] encodes to 9 bytes, the server takes at most 5 per record; shrink the record, or raise the server's --max-record-bytes", rolloutv1.ErrorReason_TOO_LARGE.String(), 0, "records[3]", false},
		{"rate limited", &ratelimit.LimitedError{Identity: "x", Bytes: 10, Rate: 5, Burst: 20, Retry: 1500 * time.Millisecond}, true, nil, codes.ResourceExhausted, "retry this call of 10 bytes in 1.5s", rolloutv1.ErrorReason_RATE_LIMITED.String(), 1500 * time.Millisecond, "", false},
		{"rate limited, never fits", &ratelimit.LimitedError{Identity: "x", Bytes: 30, Rate: 5, Burst: 20}, true, nil, codes.ResourceExhausted, "split the batch", rolloutv1.ErrorReason_RATE_LIMITED.String(), 0, "records", false},

		// Append: certainly not stored.
		{"fenced", fenced, true, nil, codes.Unavailable, "epoch 3 fenced by epoch 4; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", false},
		{"aborted", wrap(shard.ErrAborted), true, nil, codes.Unavailable, "aborted; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", false},
		{"closed", wrap(shard.ErrClosed), true, nil, codes.Unavailable, "closed; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", false},
		{"stale", wrap(shard.ErrStale), true, nil, codes.Unavailable, "stale; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", false},
		{"store failed for good", wrap(blob.ErrStoreFailed), true, nil, codes.Unavailable, "storage unavailable; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", true},
		{"store failed by this write", fmt.Errorf("%w (%w)", blob.ErrStoreFailed, blob.ErrOutcomeUnknown), true, nil, codes.Unavailable, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), outcomeUnknownRetry, "", true},
		{"shutting down", wrap(ErrShuttingDown), true, nil, codes.Unavailable, "shutting down; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", false},
		{"storage refused the write", wrap(blob.ErrUnavailable), true, nil, codes.Unavailable, "storage unavailable; not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", true},
		{"deadline before sending", wrap(context.DeadlineExceeded), true, context.DeadlineExceeded, codes.DeadlineExceeded, "not sent, so not stored", rolloutv1.ErrorReason_NOT_COMMITTED.String(), 0, "", false},
		{"cancelled before sending", wrap(context.Canceled), true, context.Canceled, codes.Canceled, "not sent, so not stored", rolloutv1.ErrorReason_NOT_COMMITTED.String(), 0, "", false},

		// Append: may have been stored. The reason wins over every other
		// class the error wraps; the code keeps a context's.
		{"outcome unknown", wrap(shard.ErrOutcomeUnknown), true, nil, codes.Unavailable, "may have been stored: retry with the same ids or request_id", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), outcomeUnknownRetry, "", false},
		{"storage outcome unknown", wrap(blob.ErrOutcomeUnknown), true, nil, codes.Unavailable, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), outcomeUnknownRetry, "", true},
		{"deadline, commit in flight", cutOff, true, context.DeadlineExceeded, codes.DeadlineExceeded, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), 0, "", false},
		{"cancelled, commit in flight", fmt.Errorf("%w (%w)", context.Canceled, blob.ErrOutcomeUnknown), true, context.Canceled, codes.Canceled, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), 0, "", false},
		{"fenced, commit in flight", fmt.Errorf("%w after %w", shard.ErrOutcomeUnknown, &shard.FencedError{Shard: "s", Local: 3, Stored: 4}), true, nil, codes.Unavailable, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), outcomeUnknownRetry, "", false},
		{"storage refused the re-read", fmt.Errorf("%w (%w)", shard.ErrOutcomeUnknown, blob.ErrUnavailable), true, nil, codes.Unavailable, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), outcomeUnknownRetry, "", true},

		// A timeout of the server's own (CommitTimeout, the open timeout, a
		// storage try) inside a call whose deadline is still far is never
		// DEADLINE_EXCEEDED: UNAVAILABLE, with a RetryInfo, and its text
		// withheld (it may name a blob).
		{"commit timeout, call's deadline far", cutOff, true, nil, codes.Unavailable, "may have been stored", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), outcomeUnknownRetry, "", true},
		{"server timeout before sending", wrap(context.DeadlineExceeded), true, nil, codes.Unavailable, "not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", true},
		{"server cancellation before sending", wrap(context.Canceled), true, nil, codes.Unavailable, "not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", true},
		{"read, server timeout", wrap(context.DeadlineExceeded), false, nil, codes.Unavailable, "retry", "", 0, "", true},
		// A call past its deadline keeps the class of an error that is not the deadline.
		{"deadline, storage refused the write", wrap(blob.ErrUnavailable), true, context.DeadlineExceeded, codes.Unavailable, "not stored, safe to retry", rolloutv1.ErrorReason_NOT_COMMITTED.String(), notCommittedRetry, "", true},

		// Reads: a storage or context error says nothing about a write.
		{"read, storage unavailable", wrap(blob.ErrUnavailable), false, nil, codes.Unavailable, "storage unavailable; retry", "", 0, "", true},
		{"read, deadline", wrap(context.DeadlineExceeded), false, context.DeadlineExceeded, codes.DeadlineExceeded, "deadline", "", 0, "", false},
		{"read, cancelled", wrap(context.Canceled), false, context.Canceled, codes.Canceled, "canceled", "", 0, "", false},
		{"read, shutting down", wrap(ErrShuttingDown), false, nil, codes.Unavailable, "shutting down; retry", "", 0, "", false},
		{"read, store failed", wrap(blob.ErrStoreFailed), false, nil, codes.Unavailable, "storage unavailable; retry", "", 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := endedContext(t, tt.ended)
			mapper := func(err error) error { return toStatus(ctx, err) }
			if tt.write {
				mapper = func(err error) error { return appendStatus(ctx, err) }
			}
			err := mapper(tt.err)
			st := status.Convert(err)
			var ie *internalError
			switch {
			case errors.As(err, &ie) != tt.internal:
				t.Errorf("%q: %T, want internal=%v", tt.err, err, tt.internal)
			case st.Code() != tt.code || !strings.Contains(st.Message(), tt.hint):
				t.Errorf("%q = %v %q, want %v with %q", tt.err, st.Code(), st.Message(), tt.code, tt.hint)
			case tt.internal && (strings.Contains(st.Message(), tt.err.Error()) || !strings.Contains(ie.detail(), tt.err.Error())):
				t.Errorf("%q = %q, detail %q: want the error's text withheld from the message and kept in the detail", tt.err, st.Message(), ie.detail())
			case !tt.internal && !strings.Contains(st.Message(), tt.err.Error()):
				t.Errorf("%q = %q, want the error's text", tt.err, st.Message())
			}
			d := detailsOf(t, st)
			if got := d.reason(t); got != tt.reason {
				t.Errorf("reason %q, want %q", got, tt.reason)
			}
			if got := d.retry.GetRetryDelay().AsDuration(); (d.retry != nil) != (tt.retry > 0) || got != tt.retry {
				t.Errorf("RetryInfo %v, want a delay of %v", d.retry, tt.retry)
			}
			if got := d.badField(t); got != tt.field {
				t.Errorf("BadRequest field %q, want %q", got, tt.field)
			}
			if len(d.other) > 0 {
				t.Errorf("unexpected details %v", d.other)
			}
			// Wrapping never changes the answer.
			if again := status.Convert(mapper(fmt.Errorf("outer: %w", tt.err))); again.Code() != st.Code() || detailsOf(t, again).reason(t) != tt.reason {
				t.Errorf("wrapped once more: %v, want %v %q", again, st.Code(), tt.reason)
			}
		})
	}
	if toStatus(t.Context(), nil) != nil || appendStatus(t.Context(), nil) != nil {
		t.Error("nil maps to a status")
	}
	// A message that reads "may have been stored" never comes with "not
	// stored", and the old blanket hint is gone.
	for _, tt := range tests {
		msg := status.Convert(appendStatus(endedContext(t, tt.ended), tt.err)).Message()
		if strings.Contains(msg, "may have been stored") && strings.Contains(msg, "not stored") {
			t.Errorf("%q: both hints: %q", tt.name, msg)
		}
	}
}

// endedContext is an RPC context whose Err is ended: nil for one that
// runs, context.DeadlineExceeded for one past its deadline, or
// context.Canceled.
func endedContext(t *testing.T, ended error) context.Context {
	switch ended {
	case nil:
		return t.Context()
	case context.DeadlineExceeded:
		ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
		t.Cleanup(cancel)
		return ctx
	case context.Canceled:
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		return ctx
	}
	t.Fatalf("endedContext(%v)", ended)
	return nil
}

// A Scan that ends after its request was accepted names the cursor to
// resume from in ErrorInfo metadata, when a new Scan can get past the
// cause; a cause no resume gets past has no reason.
func TestScanResumeAt(t *testing.T) {
	tests := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("read: %w", blob.ErrUnavailable), codes.Unavailable, rolloutv1.ErrorReason_SCAN_INTERRUPTED.String()},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), codes.DeadlineExceeded, rolloutv1.ErrorReason_SCAN_INTERRUPTED.String()},
		{fmt.Errorf("read: %w", context.Canceled), codes.Canceled, rolloutv1.ErrorReason_SCAN_INTERRUPTED.String()},
		{fmt.Errorf("%w: blob x: bad crc", shard.ErrCorrupt), codes.DataLoss, ""},
		{errors.New("boom"), codes.Internal, ""},
		{shard.ErrShardNotFound, codes.NotFound, ""},
	}
	for _, tt := range tests {
		ctx := t.Context()
		if errors.Is(tt.err, context.DeadlineExceeded) {
			ctx = endedContext(t, context.DeadlineExceeded)
		} else if errors.Is(tt.err, context.Canceled) {
			ctx = endedContext(t, context.Canceled)
		}
		st := classify(ctx, tt.err, false).resumeAt(41).status("")
		d := detailsOf(t, st)
		if st.Code() != tt.code || d.reason(t) != tt.reason || d.retry != nil || d.bad != nil {
			t.Errorf("%q: %v %v, want %v %q", tt.err, st, st.Details(), tt.code, tt.reason)
			continue
		}
		want := map[string]string(nil)
		if tt.reason != "" {
			want = map[string]string{MetadataResumeAfterSeq: "41"}
		}
		if got := d.info.GetMetadata(); !maps.Equal(got, want) {
			t.Errorf("%q: metadata %v, want %v", tt.err, got, want)
		}
	}
}
