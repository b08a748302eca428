package main

import (
	"context"
	"encoding/base64"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Attack 6 of docs/security.md at full scale against the real binary (its
// production logger): 70,000 forged page tokens in 10 s must grow the log
// by at most 1 MiB. Set ROLLOUTD_LOG_SOAK=1 to run it (about 15 s).
func TestForgedTokensLogSoak(t *testing.T) {
	if os.Getenv("ROLLOUTD_LOG_SOAK") == "" {
		t.Skip("set ROLLOUTD_LOG_SOAK=1")
	}
	p := start(t, nil, "--store", t.TempDir())
	conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rolloutv1.NewRolloutServiceClient(conn)
	forged := base64.RawURLEncoding.EncodeToString([]byte("1\x00\x00zshards/team-b/"))
	time.Sleep(time.Second) // the startup lines are out
	before := len(p.Output())
	const tokens, workers, within = 70000, 32, 10 * time.Second
	start := time.Now()
	var sent, wrong atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sent.Add(1) <= tokens {
				// Paced to the attack's rate: tokens spread over within.
				if ahead := time.Duration(sent.Load())*within/tokens - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
				_, err := c.ListShards(context.Background(), &rolloutv1.ListShardsRequest{PageToken: forged})
				if status.Code(err) != codes.InvalidArgument {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	grown := len(p.Output()) - before
	t.Logf("%d forged tokens in %v: the log grew by %d bytes; %d answers not INVALID_ARGUMENT", tokens, elapsed.Round(time.Millisecond), grown, wrong.Load())
	if wrong.Load() > 0 || grown > 1<<20 {
		t.Fatalf("%d forged tokens grew the log by %d bytes (bound %d), %d not INVALID_ARGUMENT", tokens, grown, 1<<20, wrong.Load())
	}
}
