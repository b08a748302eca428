package shard

import (
	"context"
	"errors"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// edit is a change to the manifest that the merger or GC hands to the
// committer, so that it joins the next CAS instead of racing it.
type edit struct {
	// merge replaces the contiguous generations sources (by number) with
	// output, and retires the sources.
	merge *mergeEdit
	// forget removes these generations from the retired list once GC has
	// deleted their blobs.
	forget map[format.GenKey]bool
	done   chan error // receives the outcome once; capacity 1
}

type mergeEdit struct {
	sources []format.GenKey
	output  *storagepb.Generation
}

func newEdit() *edit { return &edit{done: make(chan error, 1)} }

func (e *edit) settle(err error) { e.done <- err }

// submit hands an edit to the committer and waits for its outcome.
func (w *writer) submit(ctx context.Context, e *edit) error {
	w.mu.Lock()
	if err := w.refuseLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	if len(w.edits) == 0 {
		w.editsAt = w.opts.Clock.Now()
	}
	w.edits = append(w.edits, e)
	w.mu.Unlock()
	w.checkpointer.editArrived()
	select {
	case err := <-e.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errStaleEdit: the manifest changed so that the edit no longer applies.
var errStaleEdit = errors.New("manifest edit no longer applies")

// apply makes the edit on next, a private copy of the manifest. now stamps
// retirements.
func (e *edit) apply(next *storagepb.Manifest, now int64) error {
	if m := e.merge; m != nil {
		gens := next.GetGenerations()
		at := -1
		for i, g := range gens {
			if format.KeyOf(g) == m.sources[0] {
				at = i
				break
			}
		}
		if at < 0 || at+len(m.sources) > len(gens) {
			return errStaleEdit
		}
		for k, num := range m.sources {
			if format.KeyOf(gens[at+k]) != num {
				return errStaleEdit
			}
		}
		retire(next, gens[at:at+len(m.sources)], now)
		merged := make([]*storagepb.Generation, 0, len(gens)-len(m.sources)+1)
		merged = append(merged, gens[:at]...)
		merged = append(merged, m.output)
		merged = append(merged, gens[at+len(m.sources):]...)
		next.Generations = merged
	}
	if len(e.forget) > 0 {
		forget(next, e.forget)
	}
	return nil
}

// genNumber is what a Result reports as the generation of a record in g:
// its number, or, for a log batch, its log position.
func genNumber(g *storagepb.Generation) uint64 {
	if p := g.GetPosition(); p != 0 {
		return p
	}
	return g.GetNumber()
}
