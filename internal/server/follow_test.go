package server

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// followers opens n follow Scans of shard after seq and counts, for each,
// the cursor it has reached.
type followers struct {
	mu      sync.Mutex
	cursors []uint64
	retries int // streams refused with BACKPRESSURE, and opened again
	moved   chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startFollowers(t testing.TB, c rolloutv1.RolloutServiceClient, shard string, after uint64, n int) *followers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fs := &followers{cursors: make([]uint64, n), moved: make(chan struct{}, 1), cancel: cancel}
	for i := range n {
		fs.cursors[i] = after
		fs.wg.Go(func() { fs.follow(t, ctx, c, shard, i) })
	}
	t.Cleanup(fs.stop)
	return fs
}

// follow runs follower i as a client should: refused with BACKPRESSURE
// (opening many streams at once on one connection can be), it backs off
// and resumes from its cursor.
func (fs *followers) follow(t testing.TB, ctx context.Context, c rolloutv1.RolloutServiceClient, shard string, i int) {
	for {
		fs.mu.Lock()
		after := fs.cursors[i]
		fs.mu.Unlock()
		stream, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: shard, AfterSeq: after, Follow: true})
		for err == nil {
			var resp *rolloutv1.ScanResponse
			if resp, err = stream.Recv(); err == nil {
				fs.mu.Lock()
				fs.cursors[i] = resp.GetCursor()
				fs.mu.Unlock()
				select {
				case fs.moved <- struct{}{}:
				default:
				}
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case status.Code(err) == codes.ResourceExhausted:
			fs.mu.Lock()
			fs.retries++
			fs.mu.Unlock()
			time.Sleep(time.Duration(10+rand.IntN(90)) * time.Millisecond)
		default:
			t.Errorf("follower %d: %v", i, err)
			return
		}
	}
}

func (fs *followers) stop() { fs.cancel(); fs.wg.Wait() }

// waitFor waits until every follower's cursor reaches seq.
func (fs *followers) waitFor(t testing.TB, seq uint64) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		fs.mu.Lock()
		behind := 0
		for _, c := range fs.cursors {
			if c < seq {
				behind++
			}
		}
		fs.mu.Unlock()
		if behind == 0 {
			return
		}
		select {
		case <-fs.moved:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d followers have not reached seq %d", behind, seq)
		}
	}
}

func appendForFollowers(t testing.TB, c rolloutv1.RolloutServiceClient, shard string, i int) uint64 {
	t.Helper()
	resp, err := c.Append(context.Background(), &rolloutv1.AppendRequest{Shard: shard, Records: []*rolloutv1.Record{record("r" + strconv.Itoa(i))}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetResults()[len(resp.GetResults())-1].GetSeq()
}

// goroutinesIn counts the goroutines with any of fns on their stack.
func goroutinesIn(fns ...string) int {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range fns {
			if strings.Contains(g, fn) {
				n++
				break
			}
		}
	}
	return n
}

func storeOps(fs *faultstore.Store) int64 {
	var n int64
	for _, op := range faultstore.Ops {
		n += fs.Calls(op)
	}
	return n
}

// Follow Scans of one shard on one instance share its reader: 50 of them
// cost the store what one does per commit.
func TestFollowScansShareOneReader(t *testing.T) {
	store := faultstore.New(memstore.New(), 1)
	s := startServer(t, Config{Store: store})
	tail := appendForFollowers(t, s.client, "s", 0)
	perCommit := func(n int) float64 {
		fs := startFollowers(t, s.client, "s", tail, n)
		defer fs.stop()
		tail = appendForFollowers(t, s.client, "s", int(tail))
		fs.waitFor(t, tail)
		before := storeOps(store)
		const commits = 10
		for range commits {
			tail = appendForFollowers(t, s.client, "s", int(tail))
			fs.waitFor(t, tail)
		}
		return float64(storeOps(store)-before) / commits
	}
	one := perCommit(1)
	many := perCommit(50)
	t.Logf("store ops per commit: %.1f with one follower, %.1f with 50", one, many)
	if many > 1.5*one+2 {
		t.Errorf("store ops per commit grew from %.1f with one follower to %.1f with 50", one, many)
	}
}

// The acceptance measurement, behind ROLLOUTD_FOLLOW_SOAK=1: the whole
// process's store ops over ROLLOUTD_FOLLOW_SOAK_SECONDS (default 60), idle
// polling included, per acknowledged append at about 1.1 appends/s, with
// 2,000 followers against one.
func TestFollowSoakStoreOpsPerAppend(t *testing.T) {
	if os.Getenv("ROLLOUTD_FOLLOW_SOAK") == "" {
		t.Skip("set ROLLOUTD_FOLLOW_SOAK=1 (about 2 minutes)")
	}
	secs, _ := strconv.Atoi(os.Getenv("ROLLOUTD_FOLLOW_SOAK_SECONDS"))
	if secs <= 0 {
		secs = 60
	}
	run := func(n int) float64 {
		store := faultstore.New(memstore.New(), 1)
		s := startServer(t, Config{Store: store, MaxConcurrentStreams: uint32(n + 16)})
		defer s.stop(t)
		tail := appendForFollowers(t, s.client, "s", 0)
		fs := startFollowers(t, s.client, "s", tail, n)
		defer fs.stop()
		tail = appendForFollowers(t, s.client, "s", int(tail))
		fs.waitFor(t, tail)
		fs.mu.Lock()
		t.Logf("%d followers (%d streams refused BACKPRESSURE while opening, and opened again)", n, fs.retries)
		fs.mu.Unlock()
		t.Logf("%d followers: %d goroutines in the process, %d of them shard readers, %d running a Scan handler", n, runtime.NumGoroutine(), goroutinesIn("follow.(*tail).run"), goroutinesIn("(*service).Scan("))
		before := storeOps(store)
		start := time.Now()
		appends := 0
		tick := time.NewTicker(time.Second * 10 / 11)
		defer tick.Stop()
		for time.Since(start) < time.Duration(secs)*time.Second {
			<-tick.C
			tail = appendForFollowers(t, s.client, "s", int(tail))
			appends++
		}
		fs.waitFor(t, tail)
		ops := storeOps(store) - before
		t.Logf("%d followers: %d store ops, %d acknowledged appends in %v: %.2f ops per append", n, ops, appends, time.Since(start).Round(time.Second), float64(ops)/float64(appends))
		return float64(ops) / float64(appends)
	}
	one := run(1)
	many := run(2000)
	t.Logf("store ops per append: %.2f with one follower, %.2f with 2000 (%.2fx)", one, many, many/one)
	if many > 2*one {
		t.Errorf("2000 followers cost %.2f store ops per append, more than twice one follower's %.2f", many, one)
	}
}

// A follow stream costs the server one goroutine: the stream's own, which
// runs the handler. The shard's reader is one more for all of them.
func TestFollowStreamCostsOneGoroutine(t *testing.T) {
	s := startServer(t, Config{Store: memstore.New()})
	tail := appendForFollowers(t, s.client, "s", 0)
	const n = 20
	fs := startFollowers(t, s.client, "s", tail, n)
	tail = appendForFollowers(t, s.client, "s", int(tail))
	fs.waitFor(t, tail)
	// A goroutine serving a stream has the interceptor or the handler on
	// its stack.
	streams := goroutinesIn("(*Server).cancelOnShutdown", "(*service).Scan(")
	readers := goroutinesIn("follow.(*tail).run")
	if streams != n || readers != 1 {
		t.Errorf("%d follow streams run %d goroutines and %d shard readers, want %d and 1", n, streams, readers, n)
	}
}
