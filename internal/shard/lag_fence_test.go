package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// lagBoundFenced opens a writer whose third commit waits at the 2K lag bound
// (K = 1) while its checkpoint through position 1 is held, lets another
// writer take the shard over, and returns the first writer, the third
// append's answer, and the function that fails the held checkpoint, which
// then finds the takeover and fences the first writer.
func lagBoundFenced(t *testing.T) (w *Writer, appended <-chan error, failCheckpoint func()) {
	t.Helper()
	inner := memstore.New()
	fs := faultstore.New(inner, 1)
	ctx := context.Background()
	opts := testOptions(t)
	opts.CheckpointEvery = 1
	opts.CheckpointInterval = time.Hour
	opts.CommitTimeout = 20 * time.Second // far longer than the test waits
	opts.DisableBackground = true
	w, err := Open(ctx, fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Abort)
	g := holdCheckpoints(t, fs)
	if _, err := w.Append(ctx, entries(t, "a")); err != nil {
		t.Fatal(err)
	}
	<-g.Reached() // the checkpoint through 1 is out, and stays out
	if _, err := w.Append(ctx, entries(t, "b")); err != nil {
		t.Fatal(err)
	}
	cerr := make(chan error, 1)
	go func() { _, err := w.Append(ctx, entries(t, "c")); cerr <- err }()
	for w.QueuedBytes() == 0 {
		time.Sleep(time.Millisecond)
	}
	// Another instance takes the shard over, past the gate.
	other, err := Open(ctx, inner, "s", testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Abort)
	return w, cerr, func() {
		g.Fail(blob.ErrConditionFailed) // the held checkpoint loses its CAS: fenced
	}
}

// A commit held at the lag bound ends when the checkpointer fences the
// writer, with the fence: the writer set moves such an append to a new
// writer. It must not wait out CommitTimeout for a checkpoint that can
// never land, nor fail as storage unavailable.
func TestLagBoundWaitEndsWhenTheWriterIsFenced(t *testing.T) {
	w, appended, failCheckpoint := lagBoundFenced(t)
	failCheckpoint()
	start := time.Now()
	select {
	case err := <-appended:
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("append held at the lag bound: %v, want ErrFenced", err)
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("append held at the lag bound was never sent, yet: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatalf("append held at the lag bound still waiting %v after its writer was fenced", time.Since(start))
	}
	if err := w.Err(); !errors.Is(err, ErrFenced) {
		t.Fatalf("writer: %v, want fenced", err)
	}
}

// Close does not block on a commit held at the lag bound once the writer
// is fenced.
func TestCloseAtTheLagBoundEndsWhenTheWriterIsFenced(t *testing.T) {
	w, appended, failCheckpoint := lagBoundFenced(t)
	closed := make(chan error, 1)
	go func() { closed <- w.Close(context.Background()) }()
	for {
		w.w.mu.Lock()
		st := w.w.state
		w.w.mu.Unlock()
		if st == stateClosing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	failCheckpoint()
	start := time.Now()
	for _, c := range []<-chan error{closed, appended} {
		select {
		case err := <-c:
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("close or append at the lag bound: %v, want ErrFenced", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("close still blocked %v after its writer was fenced", time.Since(start))
		}
	}
}
