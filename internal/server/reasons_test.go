package server

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/consumer"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// TestReasonWireStrings pins the ErrorInfo reasons the server sends, byte for
// byte, as literals: they are the names of rolloutv1.ErrorReason's values, and
// a renamed value (or a regenerated enum with a changed byte) would change
// what every deployed client matches on. Each is checked in the status the
// server builds for an error of its class, and every value the enum has must
// be listed here, so that a new reason gets its string pinned too.
func TestReasonWireStrings(t *testing.T) {
	ctx := context.Background()
	scanEnded := func(err error) failure { return classify(ctx, err, false).resumeAt(7) }
	// Every reason the enum defines but its zero, which is never sent; the
	// loop strikes off the ones it pins.
	unlisted := map[rolloutv1.ErrorReason]string{}
	for n, name := range rolloutv1.ErrorReason_name {
		if n != 0 {
			unlisted[rolloutv1.ErrorReason(n)] = name
		}
	}
	for _, tc := range []struct {
		wire   string // the reason as sent, never built from the enum
		number rolloutv1.ErrorReason
		f      failure
	}{
		{"OUTCOME_UNKNOWN", 1, classify(ctx, shard.ErrOutcomeUnknown, true)},
		{"NOT_COMMITTED", 2, classify(ctx, shard.ErrFenced, true)},
		{"BACKPRESSURE", 3, classify(ctx, shard.ErrBackpressure, true)},
		{"RATE_LIMITED", 4, classify(ctx, ratelimit.ErrLimited, true)},
		{"TOO_LARGE", 5, classify(ctx, shard.ErrTooLarge, true)},
		{"SCAN_INTERRUPTED", 6, scanEnded(blob.ErrUnavailable)},
		{"SHARD_DELETED", 7, classify(ctx, shard.ErrShardDeleted, false)},
		{"SEQ_MISMATCH", 8, classify(ctx, shard.ErrSeqMismatch, true)},
		{"STORE_FULL", 9, classify(ctx, blob.ErrNoSpace, true)},
		{"CONSUMER_RESET", 10, classify(ctx, &consumer.ResetError{Generation: 3, Committed: 2}, false)},
	} {
		if got := tc.number.String(); got != tc.wire {
			t.Errorf("rolloutv1.ErrorReason(%d) is named %q, want %q: its name is the wire string", tc.number, got, tc.wire)
		}
		var infos []*errdetails.ErrorInfo
		for _, d := range tc.f.status("").Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				infos = append(infos, info)
			}
		}
		if len(infos) != 1 || infos[0].GetReason() != tc.wire || infos[0].GetDomain() != "rolloutd.io" {
			t.Errorf("the server sends %v for reason %q, want one ErrorInfo{reason %q, domain rolloutd.io}", infos, tc.wire, tc.wire)
		}
		delete(unlisted, tc.number)
	}
	for n, name := range unlisted {
		t.Errorf("rolloutv1.ErrorReason %s (%d) has no wire string pinned here", name, n)
	}
}

// The zero reason is never sent: a failure without a reason has no
// ErrorInfo.
func TestUnspecifiedReasonSendsNoErrorInfo(t *testing.T) {
	if got := rolloutv1.ErrorReason(0).String(); got != "ERROR_REASON_UNSPECIFIED" {
		t.Errorf("the zero reason is named %q", got)
	}
	f := classify(context.Background(), errors.New("boom"), false)
	for _, d := range f.status("").Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			t.Errorf("%v: an ErrorInfo on a failure without a reason", f.status("").Details())
		}
	}
}
