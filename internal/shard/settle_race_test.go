package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// queueLen returns how many appends wait in w's queue, not yet taken.
func queueLen(w *Writer) int {
	w.w.mu.Lock()
	defer w.w.mu.Unlock()
	return len(w.w.queue)
}

func waitQueue(t *testing.T, w *Writer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queueLen(w) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued, want %d", queueLen(w), n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// settleRace sets up the race between the party that fails a whole queue
// (a fence or Abort) and the queued appends' own cancellation. One commit is
// held in its log create; a sentinel append (never cancelled) and then
// 2,000 more queue behind it, each with a context of its own. kill fails the
// queue, and starts cancelAll just before: cancelAll cancels the appends one
// by one, from the back of the queue, while the failing party settles them
// from the front. Every append cancelled after the failing party took the
// queue and before it reached that append is then settled from both sides.
//
// Each append must be settled exactly once. Today both sides close its done
// channel, and the second close panics ("close of closed channel"): in the
// committer or the aborting goroutine, which kills the process, or in the
// appender's, which the server's interceptor turns into Internal.
//
// kill returns the error class that the appends it failed must get.
func settleRace(t *testing.T, kill func(t *testing.T, w *Writer, s *faultstore.Store, gate *faultstore.Gate, cancelAll func()) error) {
	// Many ids per append make each settle slow enough (it forgets every
	// id) that the woken appenders catch up with the failing party.
	const queued, idsPerAppend = 2000, 32
	// The first create of a log position is held: a commit then waits in
	// its create, and every later append queues behind it. Only the first
	// is held, so a second writer's fence passes.
	s := faultstore.New(memstore.New(), 1)
	gate := s.Hold(nth(logCreates, 0))
	t.Cleanup(gate.Release)
	opts := testOptions(t)
	opts.Logger = zap.NewNop()
	opts.DisableMerge = true
	// The held create waits while 2,000 appends queue, which under -race
	// on a loaded machine outlasts the default 30 s: its timeout would
	// halt the writer before kill ran.
	opts.CommitTimeout = time.Hour
	w, err := Open(context.Background(), s, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()

	var wg sync.WaitGroup
	errs := make([]error, queued+2)
	held, sentinel := entries(t, "held"), entries(t, "sentinel")
	wg.Go(func() { _, errs[0] = w.Append(context.Background(), held) })
	<-gate.Reached()
	wg.Go(func() { _, errs[1] = w.Append(context.Background(), sentinel) })
	waitQueue(t, w, 1)

	cancels := make([]context.CancelFunc, queued)
	for i := range queued {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cancels[i] = cancel
		es := entries(t, ids(fmt.Sprintf("q%d", i), idsPerAppend)...)
		wg.Go(func() { _, errs[i+2] = w.Append(ctx, es) })
	}
	waitQueue(t, w, queued+1)
	cancelAll := func() {
		for i := queued - 1; i >= 0; i-- {
			cancels[i]()
		}
	}

	want := kill(t, w, s, gate, cancelAll)
	wg.Wait()

	if !errors.Is(errs[1], want) {
		t.Errorf("sentinel append: %v, want %v", errs[1], want)
	}
	counts := map[string]int{}
	for i, err := range errs[2:] {
		switch {
		case err == nil:
			t.Errorf("queued append q%d succeeded; the writer was failed under it", i)
		case errors.Is(err, want):
			counts[want.Error()]++
		case errors.Is(err, context.Canceled) && !errors.Is(err, ErrOutcomeUnknown):
			counts["not sent: cancelled"]++
		default:
			t.Errorf("queued append q%d: %v, want %v or a cancellation before it was sent", i, err, want)
		}
	}
	t.Logf("queued appends: %v", counts)
	for id, n := range countRecords(t, s, "s") {
		if strings.HasPrefix(id, "q") || id == "sentinel" {
			t.Errorf("id %q is stored %d times, but its append was never sent", id, n)
		}
	}
}

// Finding 1 of issue 16, with a fence: a second writer claims the shard
// while a commit is held, and fences the log at the held create's
// position. The held create then finds the position taken, and its read of
// the position finds the fence: the committer fences the writer and fails
// the queue. The queued appends start being cancelled during that read,
// just before the fence.
func TestDoubleSettleFenceVsCancel(t *testing.T) {
	settleRace(t, func(t *testing.T, w *Writer, s *faultstore.Store, gate *faultstore.Gate, cancelAll func()) error {
		other, err := Open(context.Background(), s.Inner(), "s", testOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(other.Abort)
		// The first read of a log position after the release is the one
		// by which the held commit, its position taken, learns it was
		// fenced.
		logRead := faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet}, If: func(c faultstore.Call) bool { return strings.Contains(c.Name, "/_l/") }}
		s.OnLanded(nth(logRead, 0), func(faultstore.Call) { go cancelAll() })
		gate.Release()
		return ErrFenced
	})
}

// Finding 1 of issue 16, with Abort (as eviction, a dropped handle or a
// Close that ran out of time does it): Abort fails the queue while the
// queued appends are being cancelled.
func TestDoubleSettleAbortVsCancel(t *testing.T) {
	settleRace(t, func(t *testing.T, w *Writer, _ *faultstore.Store, _ *faultstore.Gate, cancelAll func()) error {
		go cancelAll()
		w.Abort()
		return ErrAborted
	})
}
