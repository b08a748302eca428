package shard

import (
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Folding is a merge done by the commit itself. When the newest live
// generations form a run the merger would merge next (at least MergeRun-1
// small ones, whose bytes this process still caches), the commit writes
// them and its new records as one generation and retires them in its CAS.
//
// It costs the commit a larger PUT (at most FoldMaxBytes more) and saves
// the store the merger's separate PUT of the same bytes. On a store that
// serves one request at a time, as Azurite does, that separate PUT would
// otherwise land beside the next append of a lone client about one time in
// three; on Azure it is one write transaction fewer per MergeRun appends.
// Only cached bytes are folded: a commit never reads from the store.

// foldRun is a run of generations a commit rewrites with its new records.
type foldRun struct {
	gens    []*storagepb.Generation
	datas   [][]byte
	footers []*storagepb.Footer
	bytes   int
	level   uint32
}

// pickFold chooses and claims the newest generations of next, at most
// maxBytes of them, for the commit to fold, or returns nil. The committer
// releases the claim once the commit has settled (releaseFold).
func (w *writer) pickFold(next *storagepb.Manifest, maxBytes int64) *foldRun {
	w.releaseFold()
	if w.opts.DisableMerge || w.opts.FoldMaxBytes < 0 {
		return nil
	}
	gens := next.GetGenerations()
	var bytes int64
	i := len(gens)
	w.mu.Lock()
	// Newest first, up to a generation that a merge in flight rewrites.
	for i > 0 && len(gens)-i < w.opts.MergeMaxSources-1 && !w.claimed[gens[i-1].GetNumber()] {
		b := int64(gens[i-1].GetBytes())
		if bytes+b > maxBytes {
			break
		}
		bytes += b
		i--
	}
	run := gens[i:]
	if len(run) < w.opts.MergeRun-1 { // MergeRun is at least 2
		w.mu.Unlock()
		return nil
	}
	for _, g := range run {
		w.claimed[g.GetNumber()] = true
		w.folding = append(w.folding, g.GetNumber())
	}
	w.mu.Unlock()

	f := &foldRun{gens: run}
	for _, g := range run {
		data, ok := w.opts.Cache.getData(genRef{w.shard, g.GetEpoch(), g.GetNumber()})
		if !ok {
			w.releaseFold()
			return nil
		}
		ft, err := decodeSource(w.shard, g, data)
		if err != nil {
			// Left to the merger, which reads the stored blob and reports
			// what is wrong with it.
			w.releaseFold()
			return nil
		}
		f.datas = append(f.datas, data)
		f.footers = append(f.footers, ft)
		f.bytes += len(data)
		f.level = max(f.level, g.GetLevel())
	}
	return f
}

func (f *foldRun) records() (n int) {
	for _, g := range f.gens {
		n += int(g.GetRecords())
	}
	return n
}

// releaseFold drops the committer's claim on the generations it folded or
// meant to fold.
func (w *writer) releaseFold() {
	if len(w.folding) == 0 {
		return
	}
	w.release(w.folding)
	w.folding = nil
}

// claimMerge claims plan for the merger: it fails if a generation of plan
// is claimed already or no longer live.
func (w *writer) claimMerge(plan []*storagepb.Generation) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	live := map[uint64]bool{}
	for _, g := range w.m.GetGenerations() {
		live[g.GetNumber()] = true
	}
	for _, g := range plan {
		if w.claimed[g.GetNumber()] || !live[g.GetNumber()] {
			return false
		}
	}
	for _, g := range plan {
		w.claimed[g.GetNumber()] = true
	}
	return true
}

// releaseMerge drops the merger's claim on plan.
func (w *writer) releaseMerge(plan []*storagepb.Generation) {
	nums := make([]uint64, len(plan))
	for i, g := range plan {
		nums[i] = g.GetNumber()
	}
	w.release(nums)
}

func (w *writer) release(nums []uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range nums {
		delete(w.claimed, n)
	}
}
