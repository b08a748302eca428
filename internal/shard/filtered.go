package shard

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// filteredGen is a generation of the writer's view that its memory of its
// own batches (presence.go) does not answer for: an inherited batch, a
// merged or v1 generation, a batch of its own it could not remember. An
// append tests its ids against the generation's filter, which the writer
// keeps once read, while it stays listed, for as long as the filters it
// keeps stay under maxPinnedFilterBytes: the shared cache's lock and LRU
// then drop out of every append. Generations are immutable, so a kept
// filter never goes stale.
type filteredGen struct {
	gen    *storagepb.Generation
	filter atomic.Pointer[bloom.BloomFilter] // nil until read, or when over the bound
}

// maxPinnedFilterBytes bounds the filters one writer keeps: 64 KiB covers
// about 50,000 ids at the filters' 1% false positives. The process's
// PresenceBudget bounds them over all writers. Filters beyond either are
// read through the shared cache, as before.
const maxPinnedFilterBytes = 64 << 10

func filterBytes(f *bloom.BloomFilter) int64 { return int64(f.Cap()/8) + 64 }

// filteredOf lists the generations of view that o does not answer for,
// keeping the filters that old, the list it replaces, holds for those
// still listed. It returns the bytes of the filters kept.
func filteredOf(view *storagepb.Manifest, o *ownBatches, old []*filteredGen) ([]*filteredGen, int64) {
	var kept map[format.GenKey]*filteredGen
	if len(old) > 0 {
		kept = make(map[format.GenKey]*filteredGen, len(old))
		for _, fg := range old {
			if fg.filter.Load() != nil {
				kept[format.KeyOf(fg.gen)] = fg
			}
		}
	}
	gens := view.GetGenerations()
	out := make([]*filteredGen, 0, len(gens))
	var pinned int64
	for _, g := range gens {
		if o.holds(g) {
			continue
		}
		fg := &filteredGen{gen: g}
		if k, ok := kept[format.KeyOf(g)]; ok && k.gen.GetPutId() == g.GetPutId() {
			f := k.filter.Load()
			fg.filter.Store(f)
			pinned += filterBytes(f)
		}
		out = append(out, fg)
	}
	return out, pinned
}

// lookupFiltered adds those of ids committed in todo's generations to
// present, reading each generation's filter once.
func (w *writer) lookupFiltered(ctx context.Context, todo []*filteredGen, ids []string, present map[string]shardlog.Found) error {
	src := w.source()
	for _, fg := range todo {
		f := fg.filter.Load()
		if f == nil {
			var err error
			if f, err = src.Filter(ctx, fg.gen); err != nil {
				return err
			}
			w.pin(fg, f)
		}
		if err := src.LookupIn(ctx, fg.gen, f, ids, present); err != nil {
			return err
		}
	}
	return nil
}

// pin keeps f as fg's filter if the writer's kept filters leave room. An
// fg that a checkpoint dropped from the list meanwhile is counted until
// the next one recounts (filteredOf).
func (w *writer) pin(fg *filteredGen, f *bloom.BloomFilter) {
	n := filterBytes(f)
	w.mu.Lock()
	defer w.mu.Unlock()
	if fg.filter.Load() == nil && w.pinned+n <= w.pinMax && w.written.acct.grow(n) {
		fg.filter.Store(f)
		w.pinned += n
	}
}

// retainPresenceLocked forgets what the writer kept for generations that
// view, its new checkpoint's, no longer lists, and gives the bytes back
// to the budget. The caller holds mu.
func (w *writer) retainPresenceLocked() {
	w.written.retain(w.m)
	w.filtered, w.pinned = filteredOf(w.m, &w.written, w.filtered)
	w.written.acct.settle(w.written.bytes + w.pinned)
}

// joinPresence makes the writer's presence state a charge on the
// process's budget, if it has one. Open calls it once the writer is
// claimed, before any append can charge it.
func (w *writer) joinPresence() {
	w.written.acct = w.opts.Presence.join(&w.mu, w.shedPresenceLocked)
}

// shedPresenceLocked drops the writer's presence state: its remembered
// batches, which the filters answer for from now on, and the filters it
// keeps. An append looking ids up meanwhile finds the list of filtered
// generations replaced, and looks up those it did not (findPresent). It
// does not touch the budget, whose caller accounts for it. The caller
// holds mu.
func (w *writer) shedPresenceLocked() {
	w.written.forget()
	w.filtered, w.pinned = filteredOf(w.m, &w.written, nil)
}

// leavePresenceLocked drops the writer's presence state for good, and its
// budget account: a writer that stopped taking appends has nothing to
// answer. The caller holds mu.
func (w *writer) leavePresenceLocked() {
	w.shedPresenceLocked()
	w.written.acct.leave()
}

// notDone returns the generations of filtered, a snapshot of
// writer.filtered, that are not in done. On the common path done is an
// earlier snapshot of the same list, which has only grown since: what is
// left is its tail, found without a set.
func notDone(filtered, done []*filteredGen) []*filteredGen {
	if len(done) == 0 {
		return filtered
	}
	if len(done) <= len(filtered) && &done[0] == &filtered[0] {
		return filtered[len(done):]
	}
	seen := make(map[format.GenKey]bool, len(done))
	for _, fg := range done {
		seen[format.KeyOf(fg.gen)] = true
	}
	var todo []*filteredGen
	for _, fg := range filtered {
		if !seen[format.KeyOf(fg.gen)] {
			todo = append(todo, fg)
		}
	}
	return todo
}

// appendDone adds todo, just looked up, to done. When todo continues the
// same snapshot as done, done grows as a reslice of it, which notDone
// recognizes; otherwise into a list of its own, never into the writer's.
func appendDone(done, todo []*filteredGen) []*filteredGen {
	switch {
	case len(done) == 0:
		return todo
	case len(todo) > 0 && cap(done) > len(done) && &done[:len(done)+1][len(done)] == &todo[0]:
		return done[:len(done)+len(todo)]
	}
	return append(slices.Clip(done), todo...)
}
