package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Attack 5 of docs/security.md against the real binary: 8 clients, each
// from its own loopback address (so each is its own client for the
// listing limit), list 1,000 shards with summaries, a page of 1,000, as
// fast as they are let; a bystander appends 1 KiB and reads it back every
// 200 ms. Its p50 must stay within twice its p50 before. extra are the
// server's flags. Set ROLLOUTD_LIST_SOAK=1 to run it (about a minute).
func TestListSummariesSoak(t *testing.T) {
	if os.Getenv("ROLLOUTD_LIST_SOAK") == "" {
		t.Skip("set ROLLOUTD_LIST_SOAK=1")
	}
	ctx := context.Background()
	p := start(t, nil, "--store", t.TempDir())
	var g errgroup.Group
	g.SetLimit(16)
	for i := range 1000 {
		g.Go(func() error { _, err := appendOne(ctx, p.Client, fmt.Sprintf("exp/s%04d", i), "r1"); return err })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	bystander := func(d time.Duration) time.Duration {
		var lat []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			id := fmt.Sprintf("b-%d", time.Now().UnixNano())
			t0 := time.Now()
			if _, err := appendOne(ctx, p.Client, "bystander", id); err != nil {
				t.Errorf("bystander append: %v", err)
				continue
			}
			if _, err := p.Client.Get(ctx, &rolloutv1.GetRequest{Shard: "bystander", Id: id}); err != nil {
				t.Errorf("bystander get: %v", err)
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat[len(lat)/2]
	}
	normal := bystander(5 * time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	pages, limited := 0, 0
	for i := range 8 {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}
		conn, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return (&net.Dialer{LocalAddr: local}).DialContext(ctx, "tcp", addr)
			}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := rolloutv1.NewRolloutServiceClient(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.ListShards(ctx, &rolloutv1.ListShardsRequest{Prefix: "exp", PageSize: 1000, IncludeSummary: true})
				mu.Lock()
				switch status.Code(err) {
				case codes.OK:
					pages++
				case codes.ResourceExhausted:
					limited++
				default:
					t.Errorf("ListShards: %v", err)
				}
				mu.Unlock()
				if status.Code(err) == codes.ResourceExhausted {
					time.Sleep(50 * time.Millisecond) // a client that honours no RetryInfo, nearly
				}
			}
		}()
	}
	under := bystander(20 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("bystander p50 %v before, %v under 8 listing clients (%d pages of 1,000 summaries, %d refused RATE_LIMITED)", normal, under, pages, limited)
	if under > 2*normal {
		t.Errorf("the bystander's p50 went from %v to %v, more than twice", normal, under)
	}
}
