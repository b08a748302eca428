package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// A follower keeps following across a server restart: SIGTERM ends its
// stream (SCAN_INTERRUPTED, naming the cursor), the server restarts on the
// same store and port, and the follower resumes after its cursor. It sees
// every record exactly once, in order, those appended while it was
// disconnected included.
func TestFollowResumesAcrossRestart(t *testing.T) {
	addr := freeAddr(t)
	srv := startServer(t, "--listen", addr)
	c := newClient(t, addr)
	ctx := ctxFor(t, 60*time.Second)
	const shard = "follow/1"

	appendN := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if _, err := c.Append(ctx, shard, []*rolloutv1.Record{{Id: fmt.Sprint("r-", i), Content: "x"}}); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
	}
	appendN(1, 5)

	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cur client.Cursor
	got := make(chan uint64, 100)
	ended := make(chan error, 1)
	go func() {
		for r, err := range c.Scan(fctx, shard, client.Follow(), client.WithCursor(&cur)) {
			if err != nil {
				ended <- err
				return
			}
			got <- r.GetSeq()
		}
		ended <- nil
	}()
	var seen []uint64
	await := func(n int) {
		t.Helper()
		for len(seen) < n {
			select {
			case s := <-got:
				seen = append(seen, s)
			case err := <-ended:
				t.Fatalf("the follower ended after %v: %v", seen, err)
			case <-time.After(20 * time.Second):
				t.Fatalf("the follower has %v, want %d records", seen, n)
			}
		}
	}
	await(5)
	appendN(6, 5)
	await(10)

	srv.shutdown(t, 10*time.Second) // as SIGTERM does
	srv = startOn(t, srv.dir, "--listen", addr)
	// The restarted server is reached within the first append's retry
	// budget (docs/clients.md), though the connection failed while it was
	// down.
	appendN(11, 10)
	await(20)
	select {
	case s := <-got:
		seen = append(seen, s)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	<-ended
	for i, s := range seen {
		if s != uint64(i+1) {
			t.Fatalf("the follower saw seqs %v, want 1..20 once each, in order", seen)
		}
	}
	if len(seen) != 20 || cur.Seq() != 20 {
		t.Fatalf("the follower saw %d records, cursor %d; want 20, 20", len(seen), cur.Seq())
	}
}
