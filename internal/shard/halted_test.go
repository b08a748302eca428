package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// A writer stopped by a create left in doubt answers a later append, which
// it never sent, as not sent (ErrStale: its replacement serves it), not with
// the doubt of the create that stopped it. Err still says why it stopped.
func TestWriterStoppedByDoubtRefusesNewAppendsAsNotSent(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.CommitTimeout = 100 * time.Millisecond
	w, err := Open(context.Background(), fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Abort)
	heal := fs.Partition(format.LogPrefix("s"), false)
	defer heal()
	ctx := context.Background()
	if _, err := w.Append(ctx, entries(t, "a")); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("append whose create the partition cut: %v, want ErrOutcomeUnknown", err)
	}
	if err := w.Err(); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Err of the writer the doubt stopped: %v, want ErrOutcomeUnknown", err)
	}
	_, err = w.Append(ctx, entries(t, "b"))
	if errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, ErrStale) {
		t.Fatalf("a new append on the stopped writer: %v, want ErrStale and not ErrOutcomeUnknown", err)
	}
}
