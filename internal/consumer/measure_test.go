package consumer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// TestMeasureCommitCost logs what a commit costs, in store operations,
// bytes and time, on the local store and Azurite, for consumers of 1,000
// and 100,000 shards: a commit that raises nothing, and one that raises
// one position. Behind ROLLOUTD_SUBSCRIBE_LONG=1.
func TestMeasureCommitCost(t *testing.T) {
	if os.Getenv("ROLLOUTD_SUBSCRIBE_LONG") == "" {
		t.Skip("set ROLLOUTD_SUBSCRIBE_LONG=1")
	}
	az := azurite.Start(t, azurite.Options{})
	ctx := context.Background()
	azs, err := azure.New(ctx, azure.Config{Container: "measure", ConnectionString: az.ConnectionString, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = azs.Close() })
	stores := map[string]blob.Store{"localstore": backends[1].open(t), "azurite": azs}
	for _, name := range []string{"localstore", "azurite"} {
		for _, n := range []int{1000, 100_000} {
			fs := faultstore.New(stores[name], 1)
			s := New(fs, Options{})
			k := Key{Prefix: "exp-42", Name: fmt.Sprintf("m%d", n)}
			pos := make(map[string]uint64, n)
			for i := range n {
				pos[fmt.Sprintf("exp-42/actor-%06d", i)] = 1000
			}
			if _, err := s.Commit(ctx, k, pos, 0); err != nil {
				t.Fatal(err)
			}
			b, _, _ := fs.Inner().Get(ctx, blobName(k), blob.GetOptions{})
			const rounds = 20
			measure := func(change bool) (time.Duration, float64, float64) {
				fs.ResetCounts()
				var d []time.Duration
				for i := range rounds {
					p := map[string]uint64{"exp-42/actor-000000": 1000}
					if change {
						p["exp-42/actor-000000"] = uint64(2000 + i)
					}
					start := time.Now()
					if _, err := s.Commit(ctx, k, p, 0); err != nil {
						t.Fatal(err)
					}
					d = append(d, time.Since(start))
				}
				slices.Sort(d)
				return d[rounds/2], float64(fs.Calls(faultstore.OpGet)) / rounds, float64(fs.Calls(faultstore.OpPut)) / rounds
			}
			same, g0, p0 := measure(false)
			raise, g1, p1 := measure(true)
			t.Logf("%s, %d positions (%d bytes): commit raising nothing p50 %v (%.1f gets, %.1f puts); raising one p50 %v (%.1f gets, %.1f puts)",
				name, n, len(b), same, g0, p0, raise, g1, p1)
		}
	}
}
