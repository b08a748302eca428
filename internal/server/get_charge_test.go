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

// A Get of a record the reader's cache knows is charged that record's
// size before it is read, not the largest record's: small Gets are not
// throttled by large ones they are not.
func TestGetChargesKnownRecordSize(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	if _, err := ts.client.Append(ctx, appendReq("s", "small")); err != nil {
		t.Fatal(err)
	}
	req := &rolloutv1.GetRequest{Shard: "s", Id: "small"}
	largest := ts.admission.responseBound(&rolloutv1.GetRequest{Shard: "s", Id: "never-read"})
	if _, err := ts.client.Get(ctx, req); err != nil {
		t.Fatal(err)
	}
	size, ok := ts.admission.storedSize("s", "small")
	if !ok {
		t.Fatal("the reader does not know the size of a record it just read")
	}
	if got, want := ts.admission.responseBound(req), int64(responseBuildFactor)*(size+responseFraming); got != want || got >= largest {
		t.Fatalf("a Get of a known %d-byte record is charged %d before it is built, want %d (the largest record's charge is %d)", size, got, want, largest)
	}
}
