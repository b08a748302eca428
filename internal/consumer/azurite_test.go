package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// TestAzurite runs the conditional writes against Azurite, whose answers
// to a lost condition (409 for create-only, 412 for If-Match) are Azure's:
// two members creating one consumer at once, two members committing at
// once, a reset amid stale commits, and a put whose answer is lost.
func TestAzurite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Azurite")
	}
	az := azurite.Start(t, azurite.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bs, err := azure.New(ctx, azure.Config{Container: "consumers", ConnectionString: az.ConnectionString,
		RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond, TryTimeout: 10 * time.Second, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	fs := faultstore.New(bs, 3)
	s := New(fs, Options{Logger: zaptest.NewLogger(t)})

	t.Run("create race and commit race", func(t *testing.T) {
		k := Key{Prefix: "exp", Name: "trainer"}
		const members, rounds = 2, 25
		var wg sync.WaitGroup
		errs := make(chan error, members)
		for m := range members {
			wg.Go(func() {
				for i := 1; i <= rounds; i++ {
					pos := map[string]uint64{"exp/shared": uint64(i*10 + m), fmt.Sprintf("exp/own-%d", m): uint64(i)}
					if _, err := s.Commit(ctx, k, pos, 0); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got := mustLoad(t, s, k)
		want := map[string]uint64{"exp/shared": rounds*10 + 1, "exp/own-0": rounds, "exp/own-1": rounds}
		if !maps.Equal(got.Positions, want) || got.Generation != 1 {
			t.Fatalf("stored %+v, want %v at generation 1", got, want)
		}
	})

	t.Run("reset refuses stale commits", func(t *testing.T) {
		k := Key{Prefix: "exp", Name: "reset"}
		mustCommit(t, s, k, map[string]uint64{"exp/a": 100}, 0)
		c, err := s.Reset(ctx, k, map[string]uint64{"exp/a": 1})
		if err != nil || c.Generation != 2 {
			t.Fatalf("reset: %+v, %v", c, err)
		}
		if _, err := s.Commit(ctx, k, map[string]uint64{"exp/a": 200}, 1); !errors.Is(err, ErrReset) {
			t.Fatalf("stale commit: %v, want ErrReset", err)
		}
		if got := mustLoad(t, s, k); got.Positions["exp/a"] != 1 {
			t.Fatalf("stored %v after a refused commit", got.Positions)
		}
	})

	t.Run("lost answers", func(t *testing.T) {
		k := Key{Prefix: "exp", Name: "lost"}
		defer fs.Clear()
		// The create's answer, then a merge's, are lost: each is decided by
		// a re-read, and nothing is written twice.
		fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.LoseResponse, Count: 2})
		mustCommit(t, s, k, map[string]uint64{"exp/a": 1}, 0)
		mustCommit(t, s, k, map[string]uint64{"exp/a": 2}, 0)
		if n := fs.InnerCalls(faultstore.OpPut); n == 0 {
			t.Fatal("no puts")
		}
		if got := mustLoad(t, s, k); got.Positions["exp/a"] != 2 {
			t.Fatalf("stored %v", got.Positions)
		}
		fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpDelete}, Fault: faultstore.LoseResponse, Count: 1})
		if err := s.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("list", func(t *testing.T) {
		page, err := s.List(ctx, "exp", "", 1)
		if err != nil || len(page.Consumers) != 1 || page.Next == "" {
			t.Fatalf("first page: %+v, %v", page, err)
		}
		page, err = s.List(ctx, "exp", page.Next, 10)
		if err != nil || len(page.Consumers) != 1 || page.Next != "" {
			t.Fatalf("second page: %+v, %v", page, err)
		}
	})
}
