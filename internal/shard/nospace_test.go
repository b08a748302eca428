package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// TestAppendFailsAtOnceWhenTheStoreIsFull: a log create the store refuses
// for want of space (certainly not applied) fails its appends at once, not
// after retrying until the commit's deadline, and not as an unknown
// outcome; the writer stays, and appends succeed again once space returns.
func TestAppendFailsAtOnceWhenTheStoreIsFull(t *testing.T) {
	store := faultstore.New(memstore.New(), 1)
	const shard = "full/s"
	w := open(t, store, shard)
	l := newLedger()
	ctx := context.Background()
	rs, err := w.Append(ctx, entries(t, "before"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)

	store.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.LogPrefix(shard), Fault: faultstore.Fail, Err: blob.ErrNoSpace})
	for i := range 3 {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		_, err := w.Append(actx, entries(t, "while-full"))
		took := time.Since(start)
		cancel()
		if !errors.Is(err, blob.ErrNoSpace) || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("append %d while full = %v; want blob.ErrNoSpace, certainly not stored", i, err)
		}
		if took > time.Second {
			t.Fatalf("append %d while full took %v; want a prompt failure", i, took)
		}
	}
	store.Clear()
	rs, err = w.Append(ctx, entries(t, "while-full", "after"))
	if err != nil {
		t.Fatalf("append after space returned, on the same writer: %v", err)
	}
	l.add(t, rs)
	l.verify(t, store, shard)
}
