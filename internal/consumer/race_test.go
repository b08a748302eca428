package consumer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
)

// TestConcurrentCommitsLoseNothing races two members committing the same
// consumer, over shared and own shards, with cursors that rise and fall
// (one member lags the other on the shared shards), for many rounds: the
// stored positions must end as the maximum of everything acknowledged, and
// no acknowledged commit may ever be found undone.
func TestConcurrentCommitsLoseNothing(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			// Every tenth read is slowed a little to widen the race.
			fs := faultstore.New(b.open(t), 7, faultstore.WithRules(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Fault: faultstore.Delay, Prob: 0.1, Delay: 200_000}))
			s, _ := newStore(t, fs)
			k := Key{Prefix: "exp", Name: "trainer"}
			const members, rounds = 2, 150
			acked := make([]map[string]uint64, members)
			var wg sync.WaitGroup
			errs := make(chan error, members)
			for m := range members {
				acked[m] = map[string]uint64{}
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(m), 1))
					for i := range rounds {
						pos := map[string]uint64{
							"exp/shared":                 uint64(i + rng.IntN(20)),
							fmt.Sprintf("exp/own-%d", m): uint64(i),
						}
						if rng.IntN(4) == 0 {
							pos[fmt.Sprintf("exp/r%d", rng.IntN(8))] = uint64(rng.IntN(1000))
						}
						c, err := s.Commit(ctxT(t), k, pos, 0)
						if err != nil {
							errs <- err
							return
						}
						for sh, seq := range pos {
							acked[m][sh] = max(acked[m][sh], seq)
							if c.Positions[sh] < seq {
								errs <- fmt.Errorf("member %d: commit of %s=%d answered %d", m, sh, seq, c.Positions[sh])
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			want := map[string]uint64{}
			for _, a := range acked {
				for sh, seq := range a {
					want[sh] = max(want[sh], seq)
				}
			}
			got := mustLoad(t, s, k)
			for sh, seq := range want {
				if got.Positions[sh] != seq {
					t.Errorf("%s: stored %d, the max acknowledged is %d", sh, got.Positions[sh], seq)
				}
			}
			if len(got.Positions) != len(want) {
				t.Errorf("stored %d shards, acknowledged %d", len(got.Positions), len(want))
			}
			t.Logf("%d commits, %d puts (conditions lost and re-merged included)", members*rounds, fs.Calls(faultstore.OpPut))
		})
	}
}

// TestResetRacesStaleCommits: a reset in the middle of a member's commits
// for the old generation is never undone by them: after the reset lands,
// every commit for the old generation is refused, and the stored positions
// are the reset's raised only by commits for the new generation.
func TestResetRacesStaleCommits(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s, _ := newStore(t, b.open(t))
			k := Key{Prefix: "exp", Name: "trainer"}
			mustCommit(t, s, k, map[string]uint64{"exp/a": 1000}, 0)
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				reset bool
				bad   error
				begun = make(chan struct{})
			)
			start := sync.OnceFunc(func() { close(begun) })
			wg.Go(func() {
				// A commit that fails before the reset starts must not
				// leave the test waiting for it.
				defer start()
				for i := uint64(1001); i < 1500; i++ {
					if i == 1020 {
						start() // the reset starts amid the commits
					}
					// A commit that starts once the reset has returned
					// must be refused.
					mu.Lock()
					after := reset
					mu.Unlock()
					_, err := s.Commit(ctxT(t), k, map[string]uint64{"exp/a": i}, 1)
					switch {
					case errors.Is(err, ErrReset):
						return
					case err != nil:
						bad = err
						return
					case after:
						bad = fmt.Errorf("a commit of generation 1 begun after the reset returned was acknowledged")
						return
					}
				}
			})
			<-begun
			c, err := s.Reset(ctxT(t), k, map[string]uint64{"exp/a": 5})
			mu.Lock()
			reset = true
			mu.Unlock()
			wg.Wait()
			if err != nil || bad != nil {
				t.Fatal(err, bad)
			}
			if got := mustLoad(t, s, k); got.Generation != c.Generation || got.Positions["exp/a"] != 5 {
				t.Fatalf("after the race: %+v, want the reset's exp/a=5 at generation %d", got, c.Generation)
			}
		})
	}
}

var _ blob.Store = (*faultstore.Store)(nil)
