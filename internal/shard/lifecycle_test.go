package shard

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// gate is a store that holds every put but the manifest's at its Gate until
// released; with faultstore.Deaf a held put is deaf to its context too, as
// a hung connection without a deadline would be.
type gate struct {
	store *faultstore.Store
	*faultstore.Gate
}

func newGate(inner blob.Store, opts ...faultstore.HoldOption) *gate {
	s := faultstore.New(inner, 1)
	notManifest := func(c faultstore.Call) bool { return !strings.HasSuffix(c.Name, "/_manifest") }
	return &gate{store: s, Gate: s.Hold(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, If: notManifest}, opts...)}
}

func (w *writer) currentState() state {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// waitState waits until w is in want.
func waitState(t *testing.T, w *Writer, want state) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for w.w.currentState() != want {
		if time.Now().After(deadline) {
			t.Fatalf("writer is %v, want %v", w.w.currentState(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Every verb's answer in every state of the writer (see the state doc in
// writer.go), and the state it leaves the writer in.
func TestStateMachineAnswers(t *testing.T) {
	type answers struct {
		append, err, close error // the class each must match; nil for success
		afterAbort         state
	}
	for _, tc := range []struct {
		state state
		setup func(t *testing.T, g *gate, w *Writer) (cleanup func())
		want  answers
	}{
		{stateOpen, nil, answers{nil, nil, nil, stateAborted}},
		{stateClosing, func(t *testing.T, g *gate, w *Writer) func() {
			var wg sync.WaitGroup
			wg.Go(func() { _, _ = w.Append(context.Background(), entries(t, "queued")) })
			<-g.Reached()
			wg.Go(func() { _ = w.Close(context.Background()) })
			waitState(t, w, stateClosing)
			return func() { g.Release(); wg.Wait() }
		}, answers{ErrClosed, ErrClosed, ErrClosed, stateAborted}},
		{stateClosed, func(t *testing.T, _ *gate, w *Writer) func() {
			if err := w.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			return nil
		}, answers{ErrClosed, ErrClosed, ErrClosed, stateClosed}},
		{stateAborted, func(t *testing.T, _ *gate, w *Writer) func() {
			w.Abort()
			return nil
		}, answers{ErrAborted, ErrAborted, ErrAborted, stateAborted}},
		{stateFenced, func(t *testing.T, g *gate, w *Writer) func() {
			other := open(t, g.store.Inner(), "s")
			if _, err := w.Append(context.Background(), entries(t, "late")); !errors.Is(err, ErrFenced) {
				t.Fatalf("append after another writer's claim: %v, want ErrFenced", err)
			}
			return other.Abort
		}, answers{ErrFenced, ErrFenced, ErrFenced, stateFenced}},
	} {
		t.Run(tc.state.String(), func(t *testing.T) {
			g := newGate(memstore.New())
			if tc.state != stateClosing {
				g.Release()
			}
			w := open(t, g.store, "s")
			if tc.setup != nil {
				if cleanup := tc.setup(t, g, w); cleanup != nil {
					defer cleanup()
				}
			}
			if got := w.w.currentState(); got != tc.state {
				t.Fatalf("set up %v, got %v", tc.state, got)
			}
			check := func(verb string, got, want error) {
				t.Helper()
				if (want == nil) != (got == nil) || (want != nil && !errors.Is(got, want)) {
					t.Errorf("%s when %v: %v, want %v", verb, tc.state, got, want)
				}
			}
			check("Err", w.Err(), tc.want.err)
			if tc.state != stateOpen { // an open writer's append and close are the rest of the suite
				_, err := w.Append(context.Background(), entries(t, "x"))
				check("Append", err, tc.want.append)
				if tc.state != stateClosing { // see TestSecondCloseWaitsForTheFirst
					check("Close", w.Close(context.Background()), tc.want.close)
				}
			}
			w.Abort()
			if got := w.w.currentState(); got != tc.want.afterAbort {
				t.Errorf("Abort when %v left the writer %v, want %v", tc.state, got, tc.want.afterAbort)
			}
			w.Abort() // idempotent
		})
	}
}

// A Close while another is closing waits for the first to finish, and is
// told it was the second.
func TestSecondCloseWaitsForTheFirst(t *testing.T) {
	g := newGate(memstore.New())
	w := open(t, g.store, "s")
	var wg sync.WaitGroup
	var appendErr, firstErr, secondErr error
	wg.Go(func() { _, appendErr = w.Append(context.Background(), entries(t, "queued")) })
	<-g.Reached()
	wg.Go(func() { firstErr = w.Close(context.Background()) })
	waitState(t, w, stateClosing)
	second := make(chan struct{})
	wg.Go(func() { secondErr = w.Close(context.Background()); close(second) })
	select {
	case <-second:
		t.Fatal("the second Close returned while the first was still flushing")
	case <-time.After(20 * time.Millisecond):
	}
	g.Release()
	wg.Wait()
	if appendErr != nil || firstErr != nil {
		t.Fatalf("append %v, first Close %v; want both to succeed", appendErr, firstErr)
	}
	if !errors.Is(secondErr, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", secondErr)
	}
}

// An Abort that overtakes a Close in progress leaves the writer aborted,
// and that Close reports it: it did not flush.
func TestCloseOvertakenByAbortReportsAborted(t *testing.T) {
	g := newGate(memstore.New())
	w := open(t, g.store, "s")
	var wg sync.WaitGroup
	var sentErr, queuedErr, closeErr error
	wg.Go(func() { _, sentErr = w.Append(context.Background(), entries(t, "sent")) })
	<-g.Reached()
	wg.Go(func() { _, queuedErr = w.Append(context.Background(), entries(t, "queued")) })
	waitQueue(t, w, 1)
	wg.Go(func() { closeErr = w.Close(context.Background()) })
	waitState(t, w, stateClosing)
	w.Abort()
	wg.Wait()
	if !errors.Is(closeErr, ErrAborted) {
		t.Errorf("Close overtaken by Abort: %v, want ErrAborted", closeErr)
	}
	if err := w.Err(); !errors.Is(err, ErrAborted) {
		t.Errorf("Err after Abort overtook Close: %v, want ErrAborted", err)
	}
	// Its create was held, so it may still land: it must not be told
	// "aborted", which says not stored.
	if !errors.Is(sentErr, ErrOutcomeUnknown) || errors.Is(sentErr, ErrAborted) {
		t.Errorf("append whose log create was held when aborted: %v, want ErrOutcomeUnknown", sentErr)
	}
	// Queued behind it, never sent: certainly not stored.
	if !errors.Is(queuedErr, ErrAborted) || errors.Is(queuedErr, ErrOutcomeUnknown) {
		t.Errorf("append queued behind the held create when aborted: %v, want ErrAborted", queuedErr)
	}
	g.Release()
	if n := countRecords(t, g.store, "s")["queued"]; n != 0 {
		t.Errorf("the append told ErrAborted is stored %d times", n)
	}
}

// The cleanup of a dropped handle stops the writer without waiting for its
// goroutines, even when a store call ignores its context.
func TestDroppedCleanupDoesNotWait(t *testing.T) {
	g := newGate(memstore.New(), faultstore.Deaf)
	w := open(t, g.store, "s")
	appended := make(chan error, 1)
	go func() {
		_, err := w.Append(context.Background(), entries(t, "x"))
		appended <- err
	}()
	<-g.Reached()
	returned := make(chan struct{})
	go func() { w.w.dropped(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(2 * time.Second):
		g.Release()
		t.Fatal("the cleanup of a dropped writer waited for a store call")
	}
	if err := w.Err(); !errors.Is(err, ErrAborted) {
		t.Errorf("Err after the cleanup: %v, want ErrAborted", err)
	}
	g.Release()
	// Its create was held when the writer was dropped, so it may have
	// landed: it must not be told "aborted", which says not stored.
	if err := <-appended; !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrAborted) {
		t.Errorf("append whose log create was held when the writer was dropped: %v, want ErrOutcomeUnknown", err)
	}
	w.Abort() // waits for the goroutines, for goleak
}

// A handle stays reachable while one of its own calls runs: its cleanup
// must not abort the writer under an Append or a Close whose caller holds
// the handle only for that call (`return w.Close(ctx)`).
func TestHandleIsNotDroppedWhileItsCallsRun(t *testing.T) {
	g := newGate(memstore.New())
	w, err := Open(context.Background(), g.store, "s", testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	inner := w.w
	defer inner.abort()
	appended, closed := make(chan error, 1), make(chan error, 1)
	go func(h *Writer) {
		_, err := h.Append(context.Background(), entries(t, "x"))
		appended <- err
	}(w)
	<-g.Reached()
	go func(h *Writer) { closed <- h.Close(context.Background()) }(w)
	w = nil
	deadline := time.Now().Add(5 * time.Second)
	for inner.currentState() != stateClosing && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for range 5 { // give the cleanup every chance to run
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	g.Release()
	if err := <-appended; err != nil {
		t.Errorf("append through a handle its caller no longer holds: %v", err)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close through a handle its caller no longer holds: %v", err)
	}
}
