package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// current is the process the clients talk to, and its incarnation number.
type current struct {
	mu  sync.Mutex
	p   *proc
	inc int
}

func (c *current) get() (*proc, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p, c.inc
}

func (c *current) set(p *proc, inc int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p, c.inc = p, inc
}

// claims returns the epochs the process's log says it claimed, by shard.
func claims(p *proc) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, line := range strings.Split(p.Output(), "\n") {
		var e struct {
			Msg   string
			Shard string
			Epoch uint64
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "shard writer opened" {
			out[e.Shard] = append(out[e.Shard], e.Epoch)
		}
	}
	return out
}

// TestCrashRestart runs the real binary on Azurite under load and kills it
// with SIGKILL at random moments, several times, restarting it each time.
// Clients retry every failed append with the same ids. Afterwards every
// acked record reads back exactly as sent, nothing is stored twice, and each
// incarnation claimed epochs above every epoch of the ones before it.
func TestCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	seeds(t, 1, func(t *testing.T, seed int64) {
		kills := 4
		if soak(t) > 0 {
			kills = 12
		}
		crashRestart(t, seed, kills)
	})
}

func crashRestart(t *testing.T, seed int64, kills int) {
	rng := newRand(seed, 4)
	container := containerName("crash", seed)
	hint := fmt.Sprintf("reproduce the schedule with ROLLOUTD_SIM_SEED=%d", seed)
	const shards = 4
	l := newLedger()
	var v violations
	var failures codeCounts
	var cur current
	fresh := map[string][]uint64{} // "shard inc" → epochs of newly committed acks
	var epochMu sync.Mutex
	var appends atomic.Int64

	procs := []*proc{startProc(t, "rolloutd#0", container)}
	cur.set(procs[0], 0)
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range 6 {
		clients.Go(func() {
			for b := 0; ; b++ {
				select {
				case <-stop:
					return
				default:
				}
				sh := fmt.Sprintf("crash/s%d", rng.intN(shards))
				recs := make([]*rolloutv1.Record, 1+rng.intN(3))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-b%d-r%d", c, b, j), rng.intN(2000))
				}
				l.sent(sh, recs)
				req := &rolloutv1.AppendRequest{Shard: sh, Records: recs}
				giveUp := time.Now().Add(2 * time.Minute)
				for {
					p, inc := cur.get()
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					resp, err := p.Client.Append(ctx, req)
					cancel()
					if err == nil {
						v.addErr(l.acked(sh, resp.GetResults()))
						appends.Add(1)
						epochMu.Lock()
						for _, r := range resp.GetResults() {
							if !r.GetAlreadyPresent() {
								k := fmt.Sprintf("%s %d", sh, inc)
								fresh[k] = append(fresh[k], r.GetEpoch())
							}
						}
						epochMu.Unlock()
						break
					}
					failures.add(err)
					if !retryable(err) {
						v.add("Append %s (%s) on %s: non-retryable %v", sh, recs[0].GetId(), p.Name, err)
						break
					}
					if time.Now().After(giveUp) {
						v.add("Append %s (%s): not acked after 2 minutes of retries: %v", sh, recs[0].GetId(), err)
						break
					}
					time.Sleep(rng.between(10*time.Millisecond, 100*time.Millisecond))
				}
			}
		})
	}

	for k := 1; k <= kills; k++ {
		time.Sleep(rng.between(300*time.Millisecond, 1500*time.Millisecond))
		_, acked := l.counts()
		code, _ := procs[k-1].Signal(syscall.SIGKILL, 5*time.Second)
		t.Logf("kill -9 #%d after %d acked records (exit code %d)", k, acked, code)
		procs = append(procs, startProc(t, fmt.Sprintf("rolloutd#%d", k), container))
		cur.set(procs[k], k)
	}
	time.Sleep(time.Second)
	close(stop)
	clients.Wait()

	// Every acked record reads back, through the last incarnation.
	last := procs[len(procs)-1]
	for _, k := range l.ackedIDs() {
		want, _, _ := l.expected(k[0], k[1])
		resp, err := last.Client.Get(context.Background(), &rolloutv1.GetRequest{Shard: k[0], Id: k[1]})
		if err != nil || !proto.Equal(resp.GetRecord(), want) {
			v.add("after the crashes, Get %s/%s = %s, %v; want %s", k[0], k[1], brief(resp.GetRecord()), err, brief(want))
		}
	}
	direct := directStore(t, container)
	defer direct.Close()
	rep, errs := l.checkStore(context.Background(), direct)
	for _, err := range errs {
		v.addErr(err)
	}

	// A new epoch at each restart: what each incarnation claimed (from its
	// log) and acked is above everything the ones before it claimed.
	claimed := map[string][][]uint64{} // shard → incarnation → epochs
	for inc, p := range procs {
		for sh, es := range claims(p) {
			for len(claimed[sh]) <= inc {
				claimed[sh] = append(claimed[sh], nil)
			}
			claimed[sh][inc] = es
		}
	}
	restartsSeen := 0
	for sh, incs := range claimed {
		var high uint64 // highest epoch claimed by earlier incarnations
		seen := map[uint64]int{}
		for inc, es := range incs {
			for _, e := range es {
				if prev, dup := seen[e]; dup {
					v.add("shard %s: epoch %d claimed by incarnation %d and again by %d", sh, e, prev, inc)
				}
				seen[e] = inc
				if e <= high {
					v.add("shard %s: incarnation %d claimed epoch %d, not above %d claimed before it", sh, inc, e, high)
				}
			}
			if len(es) > 0 {
				if inc > 0 {
					restartsSeen++
				}
				high = max(high, es[len(es)-1])
			}
			if list, ok := fresh[fmt.Sprintf("%s %d", sh, inc)]; ok {
				for _, e := range list {
					if len(es) == 0 || e < es[0] {
						v.add("shard %s: incarnation %d acked a record in epoch %d, which it never claimed (claims %v)", sh, inc, e, es)
					}
				}
			}
		}
	}
	sent, acked := l.counts()
	t.Logf("%d kill -9 and restarts; %d appends acked (%d records sent, %d acked, %d stored); %d (shard, restart) pairs claimed a new epoch; failures by code: %v",
		kills, appends.Load(), sent, acked, rep.stored, restartsSeen, &failures)
	if restartsSeen == 0 {
		v.add("no restarted incarnation claimed any epoch: the load did not reach it")
	}
	v.report(t, hint)
}
