package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// Found by the race hunter (issue 16): the documented answer to
// ErrOutcomeUnknown, appending again with the same ids, stores a record
// twice.
//
// Under v1 an append of a landed with its CAS response lost; the writer
// went on with a stale manifest, and a retry of a, checked against it while
// b's commit resynced, was stored a second time. Under v2 the writer stops
// instead, and the retry goes to its replacement: the retry, sent while b's
// create is held, must find a stored, and a is stored once.
func TestRetryAfterUnknownOutcomeIsNotStoredTwice(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.Logger = zap.NewNop()
	opts.DisableMerge = true
	w, err := Open(context.Background(), fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { w.Abort() }()
	ctx := context.Background()

	// On the log, a's create lands with its response lost and the read of
	// its position failing: the writer stops, and the caller retries on its
	// replacement, which inherits a.
	undo := loseCreate(fs, w)
	a := entries(t, "a")
	if _, err := w.Append(ctx, a); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append of a with a lost create response and a failed read: %v, want ErrOutcomeUnknown", err)
	}
	undo()
	w.Abort()
	if w, err = Open(ctx, fs, "s", opts); err != nil {
		t.Fatal(err)
	}

	// Hold b's create while the caller retries a.
	creating, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	logPrefix := format.LogPrefix("s")
	fs.SetHooks(faultstore.Hooks{Before: func(c faultstore.Call) {
		if c.Op == faultstore.OpPut && strings.HasPrefix(c.Name, logPrefix) {
			once.Do(func() {
				close(creating)
				<-release
			})
		}
	}})
	var wg sync.WaitGroup
	var bErr, retryErr error
	var retry []Result
	wg.Go(func() { _, bErr = w.Append(ctx, entries(t, "b")) })
	select {
	case <-creating:
	case <-time.After(10 * time.Second):
		t.Fatal("b's commit never created its log position")
	}
	retried := make(chan struct{})
	wg.Go(func() { retry, retryErr = w.Append(ctx, a); close(retried) })
	select {
	case <-retried:
	case <-time.After(5 * time.Second):
		// Only a retry that took a for new queues behind b's create.
		t.Error("the retry of a, which is stored, waited for b's commit")
	}
	close(release)
	wg.Wait()

	if bErr != nil {
		t.Errorf("append of b: %v", bErr)
	}
	if retryErr != nil {
		t.Errorf("retry of a: %v", retryErr)
	} else if !retry[0].AlreadyPresent {
		t.Errorf("retry of a, which had landed: %+v, want AlreadyPresent", retry[0])
	}
	if n := countRecords(t, fs.Inner(), "s")["a"]; n != 1 {
		t.Errorf("a is stored %d times, want once", n)
	}
}
