package localstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Deleting every blob of a directory in parallel, as a purge of a deleted
// shard does, races the fsync of one delete's directory with the pruning
// of that directory by another: the store must not take the vanished
// directory for a failed fsync and fail for good.
func TestParallelDeletesOfOneDirectory(t *testing.T) {
	s := open(t, t.TempDir())
	ctx := context.Background()
	for round := range 20 {
		var names []string
		for i := range 16 {
			names = append(names, fmt.Sprintf("shards/s%d/_g/%04d", round, i))
		}
		// Put together: a group or two, not 16 of the disk's fsyncs in
		// turn (the race is in the deletes).
		var wg sync.WaitGroup
		for _, n := range names {
			wg.Go(func() {
				if _, err := s.Put(ctx, n, []byte("x"), blob.PutOptions{}); err != nil {
					t.Errorf("Put(%q): %v", n, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for _, n := range names {
			wg.Go(func() {
				if err := s.Delete(ctx, n, blob.DeleteOptions{}); err != nil {
					t.Errorf("Delete(%q): %v", n, err)
				}
			})
		}
		wg.Wait()
		if err := s.Failed(); err != nil {
			t.Fatalf("round %d: the store failed: %v", round, err)
		}
	}
}
