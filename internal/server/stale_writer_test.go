package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// A retry, with the same id, of an append that another instance committed,
// sent to an instance whose resident writer was fenced meanwhile and whose
// manifest still lists the generation holding the id, which the new owner
// has merged away and deleted since, succeeds: the stale writer is replaced
// and the id found present. It used to fail with Internal ("unexpected
// storage not-found ... read footer of ..."), because the stale writer kept
// looking the id up in its own manifest. Found by the reliability suite's
// linearizability check (internal/reliability).
func TestRetryOnStaleWriterWithVanishedGeneration(t *testing.T) {
	store := memstore.New()
	cfg := func(merge bool) Config {
		wo := testWriterOptions(t)
		wo.MergeRun = 2
		wo.MergeMaxGenerations = 3
		wo.MergeInterval = 5 * time.Millisecond
		wo.RetireGrace = time.Millisecond
		wo.DisableMerge = !merge
		return Config{Store: store, Writer: wo}
	}
	// A does not merge, so its writer's manifest keeps listing the
	// generation that B merges away.
	a, b := startServer(t, cfg(false)), startServer(t, cfg(true))
	ctx := context.Background()

	x, err := appendOne(ctx, b.client, "s", "x") // epoch 1, generation 1
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendOne(ctx, a.client, "s", "y"); err != nil { // A claims epoch 2
		t.Fatal(err)
	}
	gen := format.LogName("s", x.GetGeneration()) // protocol v2: the ack names the log position
	for i := 0; ; i++ {                           // B takes the shard back, merges and collects gen
		if _, err := store.Head(ctx, gen); errors.Is(err, blob.ErrNotFound) {
			break
		}
		if i == 200 {
			t.Fatalf("%s was never merged away and deleted", gen)
		}
		if _, err := appendOne(ctx, b.client, "s", fmt.Sprintf("z%d", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	r, err := appendOne(ctx, a.client, "s", "x")
	if err != nil {
		t.Fatalf("retry of x on A: %v (%v); want success", err, status.Code(err))
	}
	if !r.GetAlreadyPresent() || r.GetSeq() != x.GetSeq() {
		t.Errorf("retry of x: %v; want already present at seq %d", r, x.GetSeq())
	}
}
