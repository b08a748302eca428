package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// Attack 7 of docs/security.md: one corrupt manifest (10 bytes) under a
// prefix fails only its own shard's summary, by name, with its error; the
// other shards are summarised. Before, the whole ListShards failed
// INTERNAL.
func TestListShardsCorruptShardFailsOnlyItself(t *testing.T) {
	store := memstore.New()
	ts := startTCP(t, Config{Store: store})
	c := dial(t, ts.addr, insecure.NewCredentials())
	for _, s := range []string{"exp/a", "exp/c"} {
		if _, err := c.Append(rpcCtx(t), appendReq(s, "r-1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Put(context.Background(), format.ManifestName("exp/bad"), []byte("0123456789"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{Prefix: "exp", IncludeSummary: true})
	if err != nil {
		t.Fatalf("ListShards with one corrupt shard: %v", err)
	}
	got := map[string]*rolloutv1.ListedShard{}
	for _, s := range resp.GetShards() {
		got[s.GetShard()] = s
	}
	if len(got) != 3 {
		t.Fatalf("listed %v, want exp/a, exp/bad and exp/c", resp.GetShards())
	}
	for _, s := range []string{"exp/a", "exp/c"} {
		if got[s].GetSummary().GetRecords() != 1 || got[s].GetSummaryError() != "" {
			t.Fatalf("%s: summary %v, error %q", s, got[s].GetSummary(), got[s].GetSummaryError())
		}
	}
	bad := got["exp/bad"]
	if bad.GetSummary() != nil || bad.GetSummaryError() == "" || strings.Contains(bad.GetSummaryError(), "/") && !strings.Contains(bad.GetSummaryError(), "request id") {
		t.Fatalf("exp/bad: summary %v, error %q: want its error alone", bad.GetSummary(), bad.GetSummaryError())
	}
	t.Logf("exp/bad: %s", bad.GetSummaryError())
}
