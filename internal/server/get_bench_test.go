package server

import (
	"context"
	"fmt"
	"sync"
	"testing"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// 64 concurrent Gets of small records on one connection, under the
// Deployment's budget (450 MiB): each Get is charged the largest response
// before it is built (responses.go), so a connection builds at most about
// 14 at once.
func BenchmarkConcurrentSmallGets(b *testing.B) {
	ts := startServer(b, Config{Store: memstore.New(), RequestBudgetBytes: 450 << 20})
	ctx := context.Background()
	req := &rolloutv1.AppendRequest{Shard: "s"}
	for i := range 64 {
		req.Records = append(req.Records, record(fmt.Sprintf("r%d", i)))
	}
	if _, err := ts.client.Append(ctx, req); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/64 + 1
	for g := range 64 {
		wg.Go(func() {
			for range per {
				if _, err := ts.client.Get(ctx, &rolloutv1.GetRequest{Shard: "s", Id: fmt.Sprintf("r%d", g)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
