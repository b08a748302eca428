package client_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// An Append whose connection is cut after the server committed it, before
// its answer arrived, is resent with the same request_id: the resend gets
// the same ids back, already_present, and the shard holds every record
// once, the one sent without an id included.
func TestAppendResentAfterCutConnection(t *testing.T) {
	srv := startServer(t)
	proxy := startCutProxy(t, srv.GRPCAddr)
	c := newClient(t, proxy.Addr())
	ctx := ctxFor(t, 30*time.Second)
	const shard = "retry/1"
	if _, err := c.Append(ctx, shard, []*rolloutv1.Record{{Id: "warm", Content: "connect first"}}); err != nil {
		t.Fatal(err)
	}

	proxy.armed.Store(true)
	res, err := c.Append(ctx, shard, []*rolloutv1.Record{
		{Id: "r-1", Content: "with an id"},
		{Content: "without an id: the server derives it from the request_id"},
	})
	if err != nil {
		t.Fatalf("Append through a cut connection: %v", err)
	}
	if n := proxy.cuts.Load(); n != 1 {
		t.Fatalf("the proxy cut %d responses, want 1", n)
	}
	for _, r := range res {
		if !r.GetAlreadyPresent() {
			t.Errorf("%s (seq %d) not already present: the resend stored it again", r.GetId(), r.GetSeq())
		}
	}
	stored := collect(t, newClient(t, srv.GRPCAddr).Scan(ctx, shard))
	var ids []string
	for _, r := range stored {
		ids = append(ids, r.GetId())
	}
	if want := fmt.Sprint([]string{"warm", "r-1", res[1].GetId()}); fmt.Sprint(ids) != want || len(res) != 2 || res[0].GetId() != "r-1" {
		t.Errorf("the shard holds %v, want %s; the Append returned %v", ids, want, res)
	}
}

// With retries off, the same cut is the caller's: the error says the
// Append may have been stored.
func TestCutWithoutRetriesIsOutcomeUnknown(t *testing.T) {
	srv := startServer(t)
	proxy := startCutProxy(t, srv.GRPCAddr)
	c := newClient(t, proxy.Addr(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	ctx := ctxFor(t, 30*time.Second)
	if _, err := c.Append(ctx, "retry/2", []*rolloutv1.Record{{Id: "warm"}}); err != nil {
		t.Fatal(err)
	}
	proxy.armed.Store(true)
	_, err := c.Append(ctx, "retry/2", []*rolloutv1.Record{{Id: "r-1"}}, client.WithRequestID("mine-1"))
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("a cut Append without retries: %v; want UNAVAILABLE, outcome unknown", err)
	}
	res, err := c.Append(ctx, "retry/2", []*rolloutv1.Record{{Id: "r-1"}}, client.WithRequestID("mine-1"))
	if err != nil || !res[0].GetAlreadyPresent() {
		t.Fatalf("the caller's resend: %v %v; want already present", res, err)
	}
}
