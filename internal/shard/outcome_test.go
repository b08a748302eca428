package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// logCreates selects the creates of log positions (the commits): only the
// committer creates positions once the writer is open, so watchers of them
// run on that goroutine alone; the checkpointer's manifest CASes pass.
var logCreates = faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, If: func(c faultstore.Call) bool { return strings.Contains(c.Name, "/_l/") }}

// nth returns m narrowed to its n-th call (0 the first).
func nth(m faultstore.Match, n int) faultstore.Match {
	m.Skip, m.Count = n, 1
	return m
}

// W appends [x, y] while P's append of x is queued: W's y commits, and W
// then waits for x, which P withdraws (its caller gave up). W must not be
// told its append was not stored: y is. Before, W tried again on its own,
// its context ended meanwhile, and it heard "not sent".
func TestAppendPartlyCommittedIsOutcomeUnknown(t *testing.T) {
	s := faultstore.New(memstore.New(), 1)
	w := open(t, s, "s")
	hold := s.Hold(logCreates, faultstore.Deaf)
	t.Cleanup(hold.Release)

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "z")) }) // held in its put
	waitTaken(t, w)
	ctxP, cancelP := context.WithCancel(context.Background())
	pDone := make(chan error, 1)
	go func() { _, err := w.Append(ctxP, entries(t, "x")); pDone <- err }()
	waitQueue(t, w, 1)
	ctxW, cancelW := context.WithCancel(context.Background())
	defer cancelW()
	var wErr error
	wg.Go(func() { _, wErr = w.Append(ctxW, entries(t, "x", "y")) })
	waitQueue(t, w, 2) // P's [x], then W's own [y]
	cancelP()
	if err := <-pDone; err == nil || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("P, withdrawn while queued: %v, want not sent", err)
	}
	commits := 0
	s.OnLanded(logCreates, func(c faultstore.Call) { // the held commit, then y's: W gives up just as y commits
		if c.Err != nil {
			return
		}
		if commits++; commits == 2 {
			cancelW()
		}
	})
	hold.Release()
	wg.Wait()

	if n := countRecords(t, s, "s")["y"]; n != 1 {
		t.Fatalf("y stored %d times; the test did not set up what it meant to", n)
	}
	if !errors.Is(wErr, ErrOutcomeUnknown) {
		t.Fatalf("W, whose y is stored: %v, want ErrOutcomeUnknown", wErr)
	}
}

// waitTaken waits until the committer took what was queued.
func waitTaken(t *testing.T, w *Writer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.w.mu.Lock()
		taken := w.w.queued > 0 && len(w.w.queue) == 0
		w.w.mu.Unlock()
		if taken {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer took nothing")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// W appends [x, z] while P's append of x is in flight, and W's own z is
// refused (backpressure): x may still land through P, so W must not hear
// that nothing of its append is stored.
func TestOwnFailureWhileASharedIDMayLandIsOutcomeUnknown(t *testing.T) {
	s := faultstore.New(memstore.New(), 1)
	held := s.Hold(nth(logCreates, 0), faultstore.Deaf)
	t.Cleanup(held.Release)
	opts := testOptions(t)
	opts.MaxQueuedBytes = 1 // anything more than what is in flight is refused
	w, err := Open(context.Background(), s, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	pDone := make(chan error, 1)
	go func() { _, err := w.Append(context.Background(), entries(t, "x")); pDone <- err }()
	<-held.Reached()
	_, wErr := w.Append(context.Background(), entries(t, "x", "z"))
	held.Release()
	if err := <-pDone; err != nil {
		t.Fatalf("P: %v", err)
	}
	if !errors.Is(wErr, ErrOutcomeUnknown) || !errors.Is(wErr, ErrBackpressure) {
		t.Fatalf("W, refused while its shared x was in flight: %v, want ErrOutcomeUnknown (and the backpressure)", wErr)
	}
}

// W = [y, x] waits for P2's y (committed) and P1's x (whose commit fails):
// y is stored, so W's answer must not say nothing was.
func TestSharedSuccessThenSharedFailureIsOutcomeUnknown(t *testing.T) {
	s := faultstore.New(memstore.New(), 1)
	held := s.Hold(nth(logCreates, 0), faultstore.Deaf)
	t.Cleanup(held.Release)
	// Refused before it was applied, and not retried: this commit
	// certainly stored nothing.
	s.Fail(nth(logCreates, 1), fmt.Errorf("test: log create refused: %w", blob.ErrNoSpace))
	opts := testOptions(t)
	opts.RetryBackoff = time.Millisecond
	w, err := Open(context.Background(), s, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "y")) }) // P2, held
	<-held.Reached()
	wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "x")) }) // P1, queued
	waitQueue(t, w, 1)
	wDone := make(chan error, 1)
	go func() { _, err := w.Append(context.Background(), entries(t, "y", "x")); wDone <- err }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.w.mu.Lock()
		waiting := len(w.w.queue) == 1 // W queued nothing of its own: both its ids are shared
		w.w.mu.Unlock()
		if waiting || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // W is now waiting on both
	held.Release()
	wg.Wait()
	err = <-wDone
	if n := countRecords(t, s, "s")["y"]; n != 1 {
		t.Fatalf("y stored %d times; the test did not set up what it meant to", n)
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("W, whose y is stored: %v, want ErrOutcomeUnknown", err)
	}
}
