package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
)

// twoIdentities is an mTLS server with an optional append rate limit and a
// client for each of two identities.
func twoIdentities(t testing.TB, limiter *ratelimit.Limiter) (ts *tcpServer, heavy, light rolloutv1.RolloutServiceClient) {
	t.Helper()
	p := newPKI(t, true)
	cfg := Config{ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}}
	if limiter != nil {
		cfg.AppendLimiter = limiter
	}
	ts = startTCP(t, cfg)
	heavy = dial(t, ts.addr, p.creds(t, p.clientCA.ClientURI(t, "spiffe://test/ns/team-a/sa/heavy")))
	light = dial(t, ts.addr, p.creds(t, p.clientCA.ClientURI(t, "spiffe://test/ns/team-b/sa/light")))
	return ts, heavy, light
}

func bigAppend(shardName, id string, size int) *rolloutv1.AppendRequest {
	req := appendReq(shardName, id)
	req.Records[0].Content = strings.Repeat("x", size)
	return req
}

// An identity over its append rate gets ResourceExhausted with a RetryInfo
// detail and writes nothing; another identity is not affected. (That the
// hinted delay is right is tested with a fake clock in package ratelimit;
// here the rate is so low that no scheduling delay can refill the bucket.)
func TestAppendRateLimitPerIdentity(t *testing.T) {
	limiter, err := ratelimit.New(1<<10, 32<<10) // 1 KiB/s, 32 KiB at once
	if err != nil {
		t.Fatal(err)
	}
	_, heavy, light := twoIdentities(t, limiter)

	if _, err := heavy.Append(rpcCtx(t), bigAppend("team-a/run1", "first", 20<<10)); err != nil {
		t.Fatalf("within the burst: %v", err)
	}
	_, err = heavy.Append(rpcCtx(t), bigAppend("team-a/run1", "second", 20<<10))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "spiffe://test/ns/team-a/sa/heavy") {
		t.Fatalf("over the limit: %v, want ResourceExhausted naming the identity", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	// 20.05 KiB needed, at most 11.95 KiB left: about 8 s at 1 KiB/s.
	if d := retry.GetRetryDelay().AsDuration(); retry == nil || d < 5*time.Second || d > 9*time.Second {
		t.Errorf("RetryInfo %v, want a delay of about 8 s", retry)
	}
	t.Logf("limited: %v; retry in %v", st.Message(), retry.GetRetryDelay().AsDuration())
	if _, err := heavy.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "team-a/run1", Id: "second"}); status.Code(err) != codes.NotFound {
		t.Errorf("the refused record: %v, want NotFound", err)
	}

	// The other identity appends as usual meanwhile.
	for i := range 10 {
		if _, err := light.Append(rpcCtx(t), appendReq("team-b/run1", fmt.Sprintf("l-%d", i))); err != nil {
			t.Errorf("the other identity: %v", err)
		}
	}

	// A batch over the burst can never fit: no RetryInfo, "split the batch".
	_, err = heavy.Append(rpcCtx(t), bigAppend("team-a/run1", "huge", 40<<10))
	st = status.Convert(err)
	if st.Code() != codes.ResourceExhausted || detailsOf(t, st).retry != nil || !strings.Contains(st.Message(), "split the batch") {
		t.Errorf("over the burst: %v %v", err, st.Details())
	}
}

// BenchmarkAppendLatencyBesideLimitedFlood measures the latency of one
// identity's small appends alone, then while a second identity floods
// 16 KiB appends from 4 goroutines, over mTLS on loopback with the in-memory
// store. It reports the ratio flooded/alone, with the flooder rate-limited
// (64 KiB/s) and, for comparison, without a limit.
//
//	go test -run '^$' -bench AppendLatencyBesideLimitedFlood -benchtime 400x ./internal/server/
func BenchmarkAppendLatencyBesideLimitedFlood(b *testing.B) {
	for _, limited := range []bool{true, false} {
		name := map[bool]string{true: "limited", false: "unlimited"}[limited]
		b.Run(name, func(b *testing.B) {
			var limiter *ratelimit.Limiter
			if limited {
				var err error
				if limiter, err = ratelimit.New(64<<10, 64<<10); err != nil {
					b.Fatal(err)
				}
			}
			_, heavy, light := twoIdentities(b, limiter)
			n := 0
			lightAppends := func() time.Duration {
				start := time.Now()
				for range b.N {
					n++
					if _, err := light.Append(rpcCtx(b), appendReq("team-b/run1", fmt.Sprintf("l-%d", n))); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(start)
			}
			lightAppends() // warm up connections and the writer
			b.ResetTimer()
			alone := lightAppends()

			stop := make(chan struct{})
			var wg sync.WaitGroup
			var refused, accepted atomic.Int64
			for g := range 4 {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, err := heavy.Append(rpcCtx(b), bigAppend(fmt.Sprintf("team-a/run%d", g), fmt.Sprintf("h-%d-%d", g, i), 16<<10))
						switch status.Code(err) {
						case codes.OK:
							accepted.Add(1)
						case codes.ResourceExhausted:
							refused.Add(1)
						default:
							b.Error(err)
							return
						}
					}
				})
			}
			time.Sleep(50 * time.Millisecond) // let the flood start
			floodStart := time.Now()
			flooded := lightAppends()
			floodTime := time.Since(floodStart)
			close(stop)
			wg.Wait()
			b.StopTimer()

			b.ReportMetric(float64(alone.Nanoseconds())/float64(b.N), "alone-ns/append")
			b.ReportMetric(float64(flooded.Nanoseconds())/float64(b.N), "flooded-ns/append")
			b.ReportMetric(float64(flooded)/float64(alone), "flooded/alone")
			b.ReportMetric(float64(accepted.Load())/floodTime.Seconds(), "flood-accepted/s")
			b.ReportMetric(float64(refused.Load())/floodTime.Seconds(), "flood-refused/s")
		})
	}
}
