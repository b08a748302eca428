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
	c := newContender(t, seed, argsA)
	c.clients(batches, c.anyProc, nil)
	c.verify()
}

// contender is two rolloutd processes on one container (a with extra
// flags), contending on a few shards, with the clients' ledger and what
// went wrong.
type contender struct {
	t         *testing.T
	rng       *lockedRand
	container string
	hint      string
	procs     []*proc
	l         *ledger
	v         violations
	failures  codeCounts
	attempts  atomic.Int64
	appends   atomic.Int64
	maxTries  atomic.Int64
}

// contendedShards is how many shards the processes contend on.
const contendedShards = 3

func newContender(t *testing.T, seed int64, argsA []string) *contender {
	container := containerName("contention", seed)
	return &contender{
		t:         t,
		rng:       newRand(seed, 5),
		container: container,
		hint:      fmt.Sprintf("reproduce the routing with ROLLOUTD_SIM_SEED=%d", seed),
		procs:     []*proc{startProc(t, "rolloutd-a", container, argsA...), startProc(t, "rolloutd-b", container)},
		l:         newLedger(),
	}
}

// anyProc routes a try to either process, at random.
func (c *contender) anyProc() *proc { return c.procs[c.rng.intN(2)] }

// shardName is contended shard i.
func shardName(i int) string { return fmt.Sprintf("contend/s%d", i) }

// clients runs 8 clients that send batches appends each, to shards picked
// at random; route picks the process of each try. onAck, if not nil, sees
// every acknowledged append.
func (c *contender) clients(batches int, route func() *proc, onAck func(sh string, results []*rolloutv1.AppendResult)) {
	var clients sync.WaitGroup
	for cl := range 8 {
		clients.Go(func() {
			for b := range batches {
				sh := shardName(c.rng.intN(contendedShards))
				recs := make([]*rolloutv1.Record, 1+c.rng.intN(3))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-b%d-r%d", cl, b, j), c.rng.intN(1000))
				}
				if rs := c.send(sh, recs, route); rs != nil && onAck != nil {
					onAck(sh, rs)
				}
			}
		})
	}
	clients.Wait()
}

// send appends recs to sh, retrying within the client's budget, each try
// on the process route picks. It returns the results of the try that was
// acknowledged, or nil.
func (c *contender) send(sh string, recs []*rolloutv1.Record, route func() *proc) []*rolloutv1.AppendResult {
	c.l.sent(sh, recs)
	req := &rolloutv1.AppendRequest{Shard: sh, Records: recs}
	for try := 1; ; try++ {
		p := route()
		c.attempts.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := p.Client.Append(ctx, req)
		cancel()
		if err == nil {
			c.v.addErr(c.l.acked(sh, resp.GetResults()))
			c.appends.Add(1)
			for m := c.maxTries.Load(); int64(try) > m && !c.maxTries.CompareAndSwap(m, int64(try)); m = c.maxTries.Load() {
			}
			return resp.GetResults()
		}
		c.failures.add(err)
		if !retryable(err) {
			c.v.add("Append %s (%s) on %s: non-retryable %v", sh, recs[0].GetId(), p.Name, err)
			return nil
		}
		if try == contentionBudget {
			c.v.add("Append %s (%s): not acked within the retry budget of %d tries; last: %v", sh, recs[0].GetId(), contentionBudget, err)
			return nil
		}
		time.Sleep(c.rng.between(10*time.Millisecond, 50*time.Millisecond) << min(try, 4))
	}
}

// verify reads every acknowledged record back from both processes and
// straight from storage, and fails the test on any violation.
func (c *contender) verify() {
	t := c.t
	for _, k := range c.l.ackedIDs() {
		want, _, _ := c.l.expected(k[0], k[1])
		for _, p := range c.procs {
			resp, err := p.Client.Get(context.Background(), &rolloutv1.GetRequest{Shard: k[0], Id: k[1]})
			if err != nil || !proto.Equal(resp.GetRecord(), want) {
				c.v.add("Get %s/%s on %s = %s, %v; want %s", k[0], k[1], p.Name, brief(resp.GetRecord()), err, brief(want))
			}
		}
	}
	direct := directStore(t, c.container)
	defer direct.Close()
	rep, errs := c.l.checkStore(context.Background(), direct)
	for _, err := range errs {
		c.v.addErr(err)
	}
	var fences, heals, opens float64
	for _, p := range c.procs {
		fences += p.Metric("rolloutd_writer_fences_total", "")
		heals += p.Metric("rolloutd_append_self_heals_total", "")
		opens += p.Metric("rolloutd_writer_opens_total", "")
	}
	sent, acked := c.l.counts()
	t.Logf("two processes, %d shards, random routing: %d appends acked in %d attempts (most tries for one append: %d of %d); %d records sent, %d acked, %d stored",
		contendedShards, c.appends.Load(), c.attempts.Load(), c.maxTries.Load(), contentionBudget, sent, acked, rep.stored)
	t.Logf("from /metrics: %v fences, %v self-heals, %v writer opens; client failures by code: %v", fences, heals, opens, &c.failures)
	if fences == 0 {
		c.v.add("no fence happened: the two processes never contended")
	}
	c.v.report(t, c.hint)
}
