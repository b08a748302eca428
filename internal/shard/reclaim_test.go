package shard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// TestConcurrentOpensOnASlowStoreAllEnd: eight writers open one shard at
// once while every read takes a millisecond. Each open that finds a
// higher epoch's fence claims again, and its fence sends the others back
// in turn; without a pause between those claims they outbid each other
// for ever, each round longer than the last, since every probe reads the
// fences before it.
func TestConcurrentOpensOnASlowStoreAllEnd(t *testing.T) {
	store := faultstore.New(memstore.New(), 1, faultstore.WithRules(faultstore.Rule{
		Ops: []faultstore.Op{faultstore.OpGet, faultstore.OpHead}, Fault: faultstore.Delay, Delay: time.Millisecond,
	}))
	// One writer opens first and leaves a log behind, so that the others
	// must fence it.
	first := open(t, store, "s")
	if _, err := first.Append(context.Background(), entries(t, "a")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			w, err := Open(ctx, store, "s", testOptions(t))
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			w.Abort()
		})
	}
	wg.Wait()
}
