package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
)

// opsSeen counts every store operation, whoever causes it.
type opsSeen struct {
	blob.Store
	n atomic.Int64
}

func (s *opsSeen) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	s.n.Add(1)
	return s.Store.Get(ctx, name, opts)
}

func (s *opsSeen) Head(ctx context.Context, name string) (blob.Attrs, error) {
	s.n.Add(1)
	return s.Store.Head(ctx, name)
}

func (s *opsSeen) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	s.n.Add(1)
	return s.Store.List(ctx, opts)
}

// Attack 5 of docs/security.md: the listing limiter charges a ListShards
// by the store operations it caused, each summarised shard's manifest
// reads included, and refuses the client's next listing while it is in
// debt, with a RetryInfo. (With the charge left out, the client's bucket
// stayed full after a page of 40 summaries and its next page passed.)
func TestListShardsChargedByStoreOps(t *testing.T) {
	store := &opsSeen{Store: memstore.New()}
	const burst = 250
	lim, err := ratelimit.NewCost("listing", "store ops", 0.001, burst) // no refill to speak of
	if err != nil {
		t.Fatal(err)
	}
	total, err := ratelimit.NewCost("listing (all clients)", "store ops", 0.001, 10*burst)
	if err != nil {
		t.Fatal(err)
	}
	ts := startTCP(t, Config{Store: store, ListLimiter: lim, ListTotalLimiter: total})
	c := dial(t, ts.addr, insecure.NewCredentials())
	for i := range 40 {
		if _, err := c.Append(rpcCtx(t), appendReq(fmt.Sprintf("exp/s%02d", i), "r-1")); err != nil {
			t.Fatal(err)
		}
	}
	client := "addr:127.0.0.1"
	before := store.n.Load()
	resp, err := c.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{Prefix: "exp", PageSize: 1000, IncludeSummary: true})
	if err != nil || len(resp.GetShards()) != 40 || resp.GetShards()[39].GetSummary() == nil {
		t.Fatalf("ListShards with summaries = %d shards, %v", len(resp.GetShards()), err)
	}
	ops := store.n.Load() - before
	charged := burst - lim.Tokens(client)
	t.Logf("a page of 40 summaries: %d store ops, %.1f charged", ops, charged)
	if ops < 41 || charged < float64(ops)-0.5 || charged > float64(ops)+0.5 {
		t.Fatalf("a page of 40 summaries caused %d store ops and was charged %.1f", ops, charged)
	}
	if all := 10*burst - total.Tokens(allClients); all < charged-0.5 || all > charged+0.5 {
		t.Fatalf("all clients' limit was charged %.1f, the client's %.1f", all, charged)
	}
	// Each summarised shard's reads, not one per page.
	if _, err := c.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{Prefix: "exp", PageSize: 1000, IncludeSummary: true}); err != nil {
		t.Fatalf("second page while the bucket still held %.1f: %v", lim.Tokens(client), err)
	}
	_, err = c.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{Prefix: "exp"})
	wantReason(t, "ListShards in debt", err, codes.ResourceExhausted, ReasonRateLimited)
}
