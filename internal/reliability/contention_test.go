package reliability

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// contentionBudget is the client's retry budget per append in
// TestContention: every append must be acked within it.
const contentionBudget = 10

// TestContention runs two real rolloutd processes on one Azurite container
// and routes every append attempt for the same few shards to one of them at
// random, so that each keeps fencing the other. No ack may be lost or
// duplicated, and every append must succeed within the client's retry
// budget. It reports the fence and self-heal counts from /metrics.
func TestContention(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	seeds(t, 1, func(t *testing.T, seed int64) {
		batches := 25
		if d := soak(t); d > 0 {
			batches = 150
		}
		contention(t, seed, batches, nil)
	})
}

// TestMixedFleetContention is TestContention with one process pinned to
// commit protocol v1 (--commit-protocol=v1, the first step of a rolling
// upgrade) and one in v2, contending on the same shards: no split brain,
// nothing acked lost or duplicated. A shard starts in v1 when the v1
// process creates it; the v2 process's first claim converts it, and the v1
// process then writes it in v2 too. A v1 commit's manifest CAS names the
// ETag of the manifest it read, which a v2 claim changed.
func TestMixedFleetContention(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	seeds(t, 1, func(t *testing.T, seed int64) {
		contention(t, seed, 25, []string{"--commit-protocol=v1"})
	})
}

// contention runs the test; argsA are process a's extra flags.
func contention(t *testing.T, seed int64, batches int, argsA []string) {
	rng := newRand(seed, 5)
	container := containerName("contention", seed)
	hint := fmt.Sprintf("reproduce the routing with ROLLOUTD_SIM_SEED=%d", seed)
	procs := []*proc{startProc(t, "rolloutd-a", container, argsA...), startProc(t, "rolloutd-b", container)}
	const shards = 3
	l := newLedger()
	var v violations
	var failures codeCounts
	var attempts, appends atomic.Int64
	maxTries := atomic.Int64{}
	var clients sync.WaitGroup
	for c := range 8 {
		clients.Go(func() {
			for b := range batches {
				sh := fmt.Sprintf("contend/s%d", rng.intN(shards))
				recs := make([]*rolloutv1.Record, 1+rng.intN(3))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-b%d-r%d", c, b, j), rng.intN(1000))
				}
				l.sent(sh, recs)
				req := &rolloutv1.AppendRequest{Shard: sh, Records: recs}
				for try := 1; ; try++ {
					p := procs[rng.intN(2)]
					attempts.Add(1)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					resp, err := p.Client.Append(ctx, req)
					cancel()
					if err == nil {
						v.addErr(l.acked(sh, resp.GetResults()))
						appends.Add(1)
						for m := maxTries.Load(); int64(try) > m && !maxTries.CompareAndSwap(m, int64(try)); m = maxTries.Load() {
						}
						break
					}
					failures.add(err)
					if !retryable(err) {
						v.add("Append %s (%s) on %s: non-retryable %v", sh, recs[0].GetId(), p.Name, err)
						break
					}
					if try == contentionBudget {
						v.add("Append %s (%s): not acked within the retry budget of %d tries; last: %v", sh, recs[0].GetId(), contentionBudget, err)
						break
					}
					time.Sleep(rng.between(10*time.Millisecond, 50*time.Millisecond) << min(try, 4))
				}
			}
		})
	}
	clients.Wait()

	for _, k := range l.ackedIDs() {
		want, _, _ := l.expected(k[0], k[1])
		for _, p := range procs {
			resp, err := p.Client.Get(context.Background(), &rolloutv1.GetRequest{Shard: k[0], Id: k[1]})
			if err != nil || !proto.Equal(resp.GetRecord(), want) {
				v.add("Get %s/%s on %s = %s, %v; want %s", k[0], k[1], p.Name, brief(resp.GetRecord()), err, brief(want))
			}
		}
	}
	direct := directStore(t, container)
	defer direct.Close()
	rep, errs := l.checkStore(context.Background(), direct)
	for _, err := range errs {
		v.addErr(err)
	}
	var fences, heals, opens float64
	for _, p := range procs {
		fences += p.Metric("rolloutd_writer_fences_total", "")
		heals += p.Metric("rolloutd_append_self_heals_total", "")
		opens += p.Metric("rolloutd_writer_opens_total", "")
	}
	sent, acked := l.counts()
	t.Logf("two processes, %d shards, random routing: %d appends acked in %d attempts (most tries for one append: %d of %d); %d records sent, %d acked, %d stored",
		shards, appends.Load(), attempts.Load(), maxTries.Load(), contentionBudget, sent, acked, rep.stored)
	t.Logf("from /metrics: %v fences, %v self-heals, %v writer opens; client failures by code: %v", fences, heals, opens, &failures)
	if fences == 0 {
		v.add("no fence happened: the two processes never contended")
	}
	v.report(t, hint)
}
