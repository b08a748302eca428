package reliability

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// TestGracefulShutdown sends SIGTERM to the real binary in the middle of a
// stream of appends. It must exit 0 within --shutdown-timeout; every append
// it acked must be durable, and every append it did not ack must have got
// Unavailable (the clients' deadlines are far beyond the shutdown, so no
// other answer is acceptable). After a restart nothing acked is missing,
// and re-sending the unacked appends with the same ids stores each record
// exactly once.
func TestGracefulShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	seeds(t, 1, func(t *testing.T, seed int64) {
		rounds := 2
		if soak(t) > 0 {
			rounds = 6
		}
		gracefulShutdown(t, seed, rounds)
	})
}

func gracefulShutdown(t *testing.T, seed int64, rounds int) {
	rng := newRand(seed, 6)
	container := containerName("shutdown", seed)
	hint := fmt.Sprintf("reproduce the timing choices with ROLLOUTD_SIM_SEED=%d", seed)
	l := newLedger()
	var v violations
	var failures codeCounts
	var unacked sync.Map // *rolloutv1.AppendRequest → struct{}
	var p *proc
	for round := range rounds {
		// Every other round has a tight budget, so that the graceful stop
		// may run out and fall back to cutting RPCs and aborting writers.
		timeout := 5 * time.Second
		if round%2 == 1 {
			timeout = 1500 * time.Millisecond
		}
		p = startProc(t, fmt.Sprintf("rolloutd#%d", round), container,
			"--shutdown-timeout", timeout.String(), "--drain-delay", "300ms", "--max-writers", "4")
		var appends atomic.Int64
		stop := make(chan struct{})
		var clients sync.WaitGroup
		for c := range 8 {
			clients.Go(func() {
				for b := 0; ; b++ {
					select {
					case <-stop:
						return
					default:
					}
					sh := fmt.Sprintf("term/s%d", rng.intN(6))
					recs := make([]*rolloutv1.Record, 1+rng.intN(3))
					for j := range recs {
						recs[j] = makeRecord(sh, fmt.Sprintf("r%d-c%d-b%d-r%d", round, c, b, j), rng.intN(3000))
					}
					l.sent(sh, recs)
					req := &rolloutv1.AppendRequest{Shard: sh, Records: recs}
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					resp, err := p.Client.Append(ctx, req)
					cancel()
					if err == nil {
						v.addErr(l.acked(sh, resp.GetResults()))
						appends.Add(1)
						continue
					}
					failures.add(err)
					unacked.Store(req, struct{}{})
					if status.Code(err) != codes.Unavailable {
						v.add("round %d: Append %s (%s) during shutdown got %v, want Unavailable", round, sh, recs[0].GetId(), err)
					}
					// The server is going away: wait for the test to stop us.
					<-stop
					return
				}
			})
		}
		time.Sleep(rng.between(500*time.Millisecond, 1500*time.Millisecond))
		code, took := p.Signal(syscall.SIGTERM, timeout)
		close(stop)
		clients.Wait()
		if code != 0 {
			v.add("round %d: exit code %d after SIGTERM", round, code)
		}
		if took > timeout {
			v.add("round %d: exited %v after SIGTERM, over the %v shutdown timeout", round, took, timeout)
		}
		out := p.Output()
		for _, bad := range []string{"did not close cleanly", "panic"} {
			if strings.Contains(out, bad) {
				v.add("round %d: log says %q", round, bad)
			}
		}
		t.Logf("round %d: SIGTERM after %d acked appends; exit %d in %v (--shutdown-timeout %v)", round, appends.Load(), code, took.Round(time.Millisecond), timeout)
	}

	// Restart: every acked record is there, as sent.
	q := startProc(t, "rolloutd-after", container)
	ctx := context.Background()
	for _, k := range l.ackedIDs() {
		want, _, _ := l.expected(k[0], k[1])
		resp, err := q.Client.Get(ctx, &rolloutv1.GetRequest{Shard: k[0], Id: k[1]})
		if err != nil || !proto.Equal(resp.GetRecord(), want) {
			v.add("after restart, Get %s/%s = %s, %v; want %s", k[0], k[1], brief(resp.GetRecord()), err, brief(want))
		}
	}
	// The unacked appends, re-sent with the same ids, converge.
	resent := 0
	unacked.Range(func(k, _ any) bool {
		req := k.(*rolloutv1.AppendRequest)
		resp, err := q.Client.Append(ctx, req)
		if err != nil {
			v.add("re-sending %s (%s) after restart: %v", req.GetShard(), req.GetRecords()[0].GetId(), err)
			return true
		}
		v.addErr(l.acked(req.GetShard(), resp.GetResults()))
		resent++
		return true
	})
	direct := directStore(t, container)
	defer direct.Close()
	rep, errs := l.checkStore(ctx, direct)
	for _, err := range errs {
		v.addErr(err)
	}
	sent, acked := l.counts()
	t.Logf("%d SIGTERMs under load; %d unacked appends re-sent after restart; %d records sent, %d acked, %d stored; failures by code: %v",
		rounds, resent, sent, acked, rep.stored, &failures)
	v.report(t, hint)
}
