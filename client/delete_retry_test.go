package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// deleteThroughCut runs DeleteShard through proxy, armed to cut the
// delete's answer after the server wrote the tombstone. Between the cut
// and any resend (the proxy holds the reconnect), the shard is written
// again through direct: its next incarnation. It returns the delete's
// answer.
func deleteThroughCut(t *testing.T, ctx context.Context, proxy *cutProxy, via, direct *client.Client, shard string, expected *uint64) (*rolloutv1.DeleteShardResponse, error) {
	t.Helper()
	release := proxy.holdAfterCut()
	defer release()
	proxy.armed.Store(true)
	type answer struct {
		resp *rolloutv1.DeleteShardResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := via.DeleteShard(ctx, shard, expected)
		done <- answer{resp, err}
	}()
	var early *answer // the answer, when it came before the append
	for proxy.cuts.Load() == 0 && early == nil {
		select {
		case a := <-done:
			early = &a
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if proxy.cuts.Load() == 0 {
		t.Fatalf("DeleteShard returned, the proxy cut nothing: %v, %v", early.resp, early.err)
	}
	if _, err := direct.Append(ctx, shard, []*rolloutv1.Record{{Id: "new", Content: "written after the delete"}}); err != nil {
		t.Fatalf("Append after the delete: %v", err)
	}
	release()
	if early != nil {
		return early.resp, early.err
	}
	a := <-done
	return a.resp, a.err
}

// A DeleteShard without an expected last seq whose answer is lost is not
// resent: the resend would delete the shard's next incarnation, written in
// between. The error says the delete may have taken effect.
func TestDeleteNotResentWithoutExpectedSeq(t *testing.T) {
	srv := startServer(t)
	proxy := startCutProxy(t, srv.GRPCAddr)
	via := newClient(t, proxy.Addr(), client.WithRetry(client.RetryPolicy{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	direct := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	const shard = "del-retry/1"
	if _, err := via.Append(ctx, shard, []*rolloutv1.Record{{Id: "old"}}); err != nil {
		t.Fatal(err)
	}

	resp, err := deleteThroughCut(t, ctx, proxy, via, direct, shard, nil)
	var ce *client.Error
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &ce) || ce.Attempts != 1 {
		t.Fatalf("DeleteShard through a cut answer = %v, %v; want UNAVAILABLE, outcome unknown, after 1 attempt", resp, err)
	}
	if rec, err := direct.Get(ctx, shard, "new"); err != nil || rec.GetSeq() != 2 {
		t.Fatalf("the record appended after the delete: %v, %v; want it kept, seq 2", rec, err)
	}
	if _, err := direct.Get(ctx, shard, "old"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("the record before the delete: %v; want it deleted", err)
	}
}

// With an expected last seq the delete is resent, and a resend that finds
// the shard written since answers SEQ_MISMATCH, which then also says that
// an earlier attempt may have deleted: the first one did. The new
// incarnation survives. Without a write in between, the resend finds the
// tombstone and answers already_deleted.
func TestConditionalDeleteResent(t *testing.T) {
	srv := startServer(t)
	proxy := startCutProxy(t, srv.GRPCAddr)
	via := newClient(t, proxy.Addr(), client.WithRetry(client.RetryPolicy{MaxAttempts: 5, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	direct := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	const shard = "del-retry/2"
	if _, err := via.Append(ctx, shard, []*rolloutv1.Record{{Id: "old"}}); err != nil {
		t.Fatal(err)
	}

	last := uint64(1)
	resp, err := deleteThroughCut(t, ctx, proxy, via, direct, shard, &last)
	var ce *client.Error
	if !errors.Is(err, client.ErrSeqMismatch) || !errors.Is(err, client.ErrOutcomeUnknown) || !errors.As(err, &ce) || ce.Attempts < 2 || ce.Metadata[client.MetadataLastSeq] != "2" {
		t.Fatalf("conditional DeleteShard, resent after a write = %v, %v; want SEQ_MISMATCH naming 2, outcome unknown, resent", resp, err)
	}
	if rec, err := direct.Get(ctx, shard, "new"); err != nil || rec.GetSeq() != 2 {
		t.Fatalf("the record appended after the delete: %v, %v; want it kept, seq 2", rec, err)
	}

	// Now nothing is written between the attempts: the resend finds the
	// first attempt's tombstone.
	proxy.armed.Store(true)
	last = 2
	resp, err = via.DeleteShard(ctx, shard, &last)
	if err != nil || !resp.GetAlreadyDeleted() || resp.GetLastSeq() != 2 || proxy.cuts.Load() != 2 {
		t.Fatalf("conditional DeleteShard through a cut answer = %v, %v (cuts %d); want already deleted through seq 2", resp, err, proxy.cuts.Load())
	}
	if _, err := direct.Get(ctx, shard, "new"); !errors.Is(err, client.ErrShardDeleted) {
		t.Fatalf("Get after the delete: %v; want SHARD_DELETED", err)
	}
}
