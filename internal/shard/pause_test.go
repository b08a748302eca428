package shard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// pausedOptions are the options of a writer whose time is clk: every timer
// of its checkpointer, merger and collector, and its edit delay and retire
// grace, run on clk alone, and its merger also wakes after commits.
func pausedOptions(t *testing.T, clk clock.Clock) Options {
	o := testOptions(t)
	o.Clock = clk
	o.CheckpointEvery = 2
	o.CheckpointInterval = time.Second
	o.MergeRun = 4
	o.MergeMaxGenerations = 8
	o.MergeInterval = time.Second
	o.EditDelay = 100 * time.Millisecond
	o.RetireGrace = 10 * time.Second
	return o
}

// The stale writer after a long pause (issue 21, "pause the writer's
// goroutines and clock, no sleeps"; SlateDB #352, #1622): writer A is
// paused whole. Its committer waits at the store with its next create held
// unsent, and its clock is frozen, so its checkpointer, merger and
// collector wait on timers that do not fire. Meanwhile B takes the shard
// over, commits, checkpoints and merges, and GC collects the log positions
// the merges retired, all driven by B's own clock, until every position
// up to one past A's next is collected or a fence. Then A's clock jumps
// past every interval and grace period, and its create goes out: A must
// not ack, whatever its woken goroutines do, and every acked record reads
// back once, also for a writer that takes the shard over afterwards.
func TestStaleWriterWithAFrozenClock(t *testing.T) {
	gate := newLogGate(memstore.New())
	ctx := context.Background()
	l := newLedger()
	start := time.Unix(1_700_000_000, 0)
	clockA, clockB := clock.NewFake(start), clock.NewFake(start)
	a, err := Open(ctx, gate.s, "s", pausedOptions(t, clockA))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Abort()
	for i := range 5 {
		l.add(t, appendIDs(t, a, fmt.Sprint("a", i)))
	}
	// The checkpoints A's commits called for run on its checkpointer's
	// goroutine; one still in flight would land during the pause below.
	// With fewer than K positions waiting and its clock frozen, A calls
	// for none.
	waitFor(t, "A's checkpoints of its first commits", func() bool {
		s := a.Stats()
		return s.LogTail-s.LogCheckpoint < 2
	})

	// A pauses: its create held, its clock frozen from here on.
	gate.holdLog(a)
	staleErr := make(chan error, 1)
	go func() {
		rs, err := a.Append(ctx, entries(t, "stale"))
		if err == nil {
			l.add(t, rs)
		}
		staleErr <- err
	}()
	held := gate.held(t)
	pos, ok := format.ParseLogName("s", held)
	if !ok {
		t.Fatalf("held create of %s, not a log position", held)
	}
	checkpointsA := a.Stats().Checkpoints

	// B takes over and works on its own clock.
	b, err := Open(ctx, gate.s, "s", pausedOptions(t, clockB))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Abort()
	for i := range 12 {
		l.add(t, appendIDs(t, b, fmt.Sprint("b", i)))
	}
	collected := func(q uint64) bool {
		e, err := shardlog.NewSource(gate.s.Inner(), NewBlobCache(1<<20), "s").Entry(ctx, q, 0)
		if errors.Is(err, blob.ErrNotFound) {
			return true
		}
		if err != nil {
			t.Fatal(err)
		}
		return e.Fence()
	}
	waitFor(t, fmt.Sprintf("B's merges and GC to collect log positions 1..%d", pos+1), func() bool {
		clockB.Advance(500 * time.Millisecond)
		for q := uint64(1); q <= pos+1; q++ {
			if !collected(q) {
				return false
			}
		}
		return b.Stats().Merges > 0
	})
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-staleErr:
		t.Fatalf("the paused writer's append returned during its pause: %v", err)
	default:
	}
	if n := a.Stats().Checkpoints; n != checkpointsA {
		t.Fatalf("the paused writer checkpointed %d times during its pause", n-checkpointsA)
	}

	// A resumes: its clock jumps, then its create goes out.
	clockA.Advance(time.Hour)
	gate.open()
	if err := <-staleErr; !errors.Is(err, ErrFenced) {
		t.Fatalf("the stale writer's append after its pause: %v, want ErrFenced", err)
	}
	for range 3 { // and whatever its woken goroutines do next
		clockA.Advance(time.Hour)
		if _, err := a.Append(ctx, entries(t, "stale-again")); err == nil {
			t.Fatal("the stale writer acked again after its pause")
		}
	}
	a.Abort()
	l.verify(t, gate.s.Inner(), "s")

	// A writer that takes over afterwards inherits every acked record once.
	c, err := Open(ctx, gate.s.Inner(), "s", testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	l.add(t, appendIDs(t, c, "c"))
	rs, err := c.Append(ctx, entries(t, "a0", "b0", "stale"))
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].AlreadyPresent || !rs[1].AlreadyPresent || rs[2].AlreadyPresent {
		t.Fatalf("resend of a0, b0 and the stale append to a later writer: %+v; want the first two present, stale stored now", rs)
	}
	l.add(t, rs[2:])
	l.verify(t, gate.s.Inner(), "s")
}
