package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

func seqs(recs []*rolloutv1.Record) []uint64 {
	var out []uint64
	for _, r := range recs {
		out = append(out, r.GetSeq())
	}
	return out
}

// collect runs a scan to its end and returns what it yielded.
func collect(t *testing.T, scan func(yield func(*rolloutv1.Record, error) bool)) []*rolloutv1.Record {
	t.Helper()
	var out []*rolloutv1.Record
	for r, err := range scan {
		if err != nil {
			t.Fatalf("scan: %v (after %d records)", err, len(out))
		}
		out = append(out, r)
	}
	return out
}

// Append, Get and Scan against the real binary, with Scan's filters, its
// field mask, its limit, its cursor, and a follower.
func TestAppendGetScan(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 30*time.Second)
	const shard = "exp-1/actor-1"

	reward := float32(1)
	res, err := c.Append(ctx, shard, []*rolloutv1.Record{
		{Id: "r-1", RolloutId: "rollout-1", Role: rolloutv1.Role_ROLE_USER, Content: "2+2?"},
		{Id: "r-2", RolloutId: "rollout-1", Role: rolloutv1.Role_ROLE_ASSISTANT, Content: "4"},
		{RolloutId: "rollout-1", Role: rolloutv1.Role_ROLE_GRADE, Reward: &reward}, // the server derives its id
		{Id: "r-4", RolloutId: "rollout-2", Role: rolloutv1.Role_ROLE_USER, Content: "3+3?"},
		{Id: "r-5", RolloutId: "rollout-2", Role: rolloutv1.Role_ROLE_ASSISTANT, Content: "6"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 || res[0].GetId() != "r-1" || res[2].GetId() == "" || res[4].GetSeq() != 5 {
		t.Fatalf("results %v", res)
	}
	for _, r := range res {
		if r.GetAlreadyPresent() {
			t.Errorf("%s already present on the first Append", r.GetId())
		}
	}

	got, err := c.Get(ctx, shard, res[2].GetId())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSeq() != 3 || got.GetReward() != 1 || got.GetCreatedAt() == nil {
		t.Errorf("Get: %v", got)
	}

	all := collect(t, c.Scan(ctx, shard))
	if fmt.Sprint(seqs(all)) != "[1 2 3 4 5]" || all[1].GetContent() != "4" {
		t.Errorf("Scan: %v", all)
	}
	if got := seqs(collect(t, c.Scan(ctx, shard, client.AfterSeq(2), client.Limit(2)))); fmt.Sprint(got) != "[3 4]" {
		t.Errorf("Scan after 2, limit 2: %v", got)
	}
	if got := seqs(collect(t, c.Scan(ctx, shard, client.RolloutID("rollout-2")))); fmt.Sprint(got) != "[4 5]" {
		t.Errorf("Scan of rollout-2: %v", got)
	}
	slim := collect(t, c.Scan(ctx, shard, client.Fields("id", "role")))
	if len(slim) != 5 || slim[1].GetContent() != "" || slim[1].GetRole() != rolloutv1.Role_ROLE_ASSISTANT || slim[1].GetSeq() != 2 {
		t.Errorf("Scan with fields id, role: %v", slim)
	}

	// The cursor is the seq of the record being yielded, and at the end of
	// a batch the batch's cursor, past the records the filter skipped.
	var cur client.Cursor
	var during []uint64
	for r, err := range c.Scan(ctx, shard, client.Role(rolloutv1.Role_ROLE_USER), client.WithCursor(&cur)) {
		if err != nil {
			t.Fatal(err)
		}
		if cur.Seq() != r.GetSeq() {
			t.Errorf("cursor %d while yielding seq %d", cur.Seq(), r.GetSeq())
		}
		during = append(during, r.GetSeq())
	}
	if fmt.Sprint(during) != "[1 4]" || cur.Seq() != 5 {
		t.Errorf("user records %v, cursor %d after the scan; want [1 4], 5 (the batch's cursor, past the filtered seq 5)", during, cur.Seq())
	}

	// A follower sees what is appended after it started, in order, and
	// ends with its context.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got2 := make(chan *rolloutv1.Record, 16)
	ended := make(chan error, 1)
	go func() {
		for r, err := range c.Scan(fctx, shard, client.Follow(), client.AfterSeq(5)) {
			if err != nil {
				ended <- err
				return
			}
			got2 <- r
		}
		ended <- nil
	}()
	for i := range 3 {
		if _, err := c.Append(ctx, shard, []*rolloutv1.Record{{Id: fmt.Sprint("f-", i), Content: "later"}}); err != nil {
			t.Fatal(err)
		}
	}
	for want := uint64(6); want <= 8; want++ {
		select {
		case r := <-got2:
			if r.GetSeq() != want {
				t.Fatalf("follower got seq %d, want %d", r.GetSeq(), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("follower did not get seq %d", want)
		}
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("follower ended with %v, want context.Canceled", err)
	}
}

// Errors come back as *Error values that errors.Is matches by class, with
// the server's message and details, and without resends of what no resend
// can fix.
func TestErrors(t *testing.T) {
	srv := startServer(t, "--max-record-bytes", "4096")
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 30*time.Second)

	if _, err := c.Append(ctx, "errs/1", []*rolloutv1.Record{{Id: "a", Content: "one"}}); err != nil {
		t.Fatal(err)
	}
	_, errSameID := c.Append(ctx, "errs/1", []*rolloutv1.Record{{Id: "a", Content: "two"}})
	_, errGetShard := c.Get(ctx, "errs/none", "a")
	_, errGetID := c.Get(ctx, "errs/1", "b")
	_, errShard := c.Append(ctx, "../etc", []*rolloutv1.Record{{Content: "x"}})
	_, errBig := c.Append(ctx, "errs/1", []*rolloutv1.Record{{Id: "ok", Content: "x"}, {Id: "big", Content: strings.Repeat("x", 5000)}})
	_, errReqID := c.Append(ctx, "errs/2", []*rolloutv1.Record{{Content: "first"}}, client.WithRequestID("req-1"))
	if errReqID != nil {
		t.Fatal(errReqID)
	}
	_, errReqID = c.Append(ctx, "errs/2", []*rolloutv1.Record{{Content: "other"}}, client.WithRequestID("req-1"))
	_, errScan := collectErr(c.Scan(ctx, "errs/none"))
	small := newClient(t, srv.GRPCAddr, client.WithMaxMessageBytes(1024))
	_, errOverLimit := small.Append(ctx, "errs/1", []*rolloutv1.Record{{Content: strings.Repeat("x", 2000)}})

	tests := []struct {
		name   string
		err    error
		is     []error
		isNot  []error
		code   codes.Code
		reason string
		field  string
	}{
		{"same id, other content", errSameID, []error{client.ErrAlreadyExists}, []error{client.ErrOutcomeUnknown}, codes.AlreadyExists, "", ""},
		{"get: no shard", errGetShard, []error{client.ErrNotFound}, []error{client.ErrUnavailable}, codes.NotFound, "", ""},
		{"get: no id", errGetID, []error{client.ErrNotFound}, nil, codes.NotFound, "", ""},
		{"scan: no shard", errScan, []error{client.ErrNotFound}, nil, codes.NotFound, "", ""},
		{"invalid shard", errShard, []error{client.ErrInvalidArgument}, []error{client.ErrNotFound}, codes.InvalidArgument, "", ""},
		{"record over --max-record-bytes", errBig, []error{client.ErrTooLarge}, []error{client.ErrRateLimited, client.ErrOutcomeUnknown}, codes.ResourceExhausted, client.ReasonTooLarge, "records[1]"},
		{"request_id reused for other records", errReqID, []error{client.ErrAlreadyExists}, nil, codes.AlreadyExists, "", ""},
		{"message over the client's limit", errOverLimit, []error{client.ErrTooLarge}, nil, codes.ResourceExhausted, "", ""},
	}
	for _, tt := range tests {
		var e *client.Error
		if !errors.As(tt.err, &e) {
			t.Errorf("%s: %T %v, want a *client.Error", tt.name, tt.err, tt.err)
			continue
		}
		for _, class := range tt.is {
			if !errors.Is(tt.err, class) {
				t.Errorf("%s: %v is not %v", tt.name, tt.err, class)
			}
		}
		for _, class := range tt.isNot {
			if errors.Is(tt.err, class) {
				t.Errorf("%s: %v is %v", tt.name, tt.err, class)
			}
		}
		if e.Code != tt.code || e.Reason != tt.reason || e.Field != tt.field || status.Code(tt.err) != tt.code {
			t.Errorf("%s: code %v reason %q field %q, want %v %q %q", tt.name, e.Code, e.Reason, e.Field, tt.code, tt.reason, tt.field)
		}
		if e.Message == "" || e.Attempts != 1 {
			t.Errorf("%s: message %q after %d attempts, want the server's message after 1", tt.name, e.Message, e.Attempts)
		}
		t.Logf("%s: %v", tt.name, tt.err)
	}

	// The call's deadline ends the call, and says so.
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	if _, err := c.Get(short, "errs/1", "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get past its deadline: %v", err)
	}
	c.Close()
	if _, err := c.Get(ctx, "errs/1", "a"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if _, err := collectErr(c.Scan(ctx, "errs/1")); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Scan after Close: %v", err)
	}
}

// collectErr runs a scan to its end and returns what it yielded and its
// error.
func collectErr(scan func(yield func(*rolloutv1.Record, error) bool)) ([]*rolloutv1.Record, error) {
	var out []*rolloutv1.Record
	for r, err := range scan {
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// An Append the server cannot be reached for is resent within the budget,
// and then reported as possibly stored; a Get as unavailable.
func TestUnreachable(t *testing.T) {
	addr := freeAddr(t)
	c := newClient(t, addr, client.WithRetry(client.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	ctx := ctxFor(t, 30*time.Second)
	_, err := c.Append(ctx, "a/b", []*rolloutv1.Record{{Content: "x"}})
	var e *client.Error
	if !errors.As(err, &e) || e.Attempts != 3 || !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("Append to nothing: %v; want UNAVAILABLE, outcome unknown, after 3 attempts", err)
	}
	_, err = c.Get(ctx, "a/b", "x")
	if !errors.As(err, &e) || e.Attempts != 3 || !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Errorf("Get from nothing: %v; want UNAVAILABLE after 3 attempts", err)
	}
}

// A call over the caller's append rate limit waits the server's RetryInfo
// delay and goes through; a call larger than the limit's burst never fits
// and returns at once.
func TestRateLimited(t *testing.T) {
	srv := startServer(t, "--append-rate-limit", "20000", "--append-rate-burst", "20000")
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 30*time.Second)
	rec := func(id string, n int) []*rolloutv1.Record {
		return []*rolloutv1.Record{{Id: id, Content: strings.Repeat("x", n)}}
	}
	if _, err := c.Append(ctx, "rl/1", rec("a", 15000)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Append(ctx, "rl/1", rec("b", 15000)); err != nil {
		t.Fatalf("an Append over the rate, with a RetryInfo: %v", err)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("the second Append took %v: it should have waited for the limit's RetryInfo", waited)
	}
	_, err := c.Append(ctx, "rl/1", rec("c", 30000))
	var e *client.Error
	if !errors.As(err, &e) || !errors.Is(err, client.ErrRateLimited) || !errors.Is(err, client.ErrTooLarge) || e.RetryDelay != 0 || e.Attempts != 1 || e.Field != "records" {
		t.Errorf("an Append over the burst: %#v; want RATE_LIMITED, too large, field records, after 1 attempt", err)
	}
	if e != nil && e.Message == "" {
		t.Error("no message")
	}
}
