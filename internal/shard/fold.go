package shard

import (
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
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
func (c *committer) pickFold(next *storagepb.Manifest, maxBytes int64) *foldRun {
	w := c.w
	c.releaseFold()
	if w.opts.DisableBackground || w.opts.FoldMaxBytes < 0 {
		return nil
	}
	// Newest first, up to a generation that a merge in flight rewrites.
	run := w.claims.claimNewest(next.GetGenerations(), w.opts.MergeRun-1, w.opts.MergeMaxSources-1, maxBytes) // MergeRun is at least 2
	if run == nil {
		return nil
	}
	for _, g := range run {
		c.folding = append(c.folding, keyOf(g))
	}

	f := &foldRun{gens: run}
	for _, g := range run {
		data, ok := w.opts.Cache.GetData(shardlog.RefOf(w.shard, g))
		if !ok {
			c.releaseFold()
			return nil
		}
		ft, err := decodeSource(w.shard, g, data)
		if err != nil {
			// Left to the merger, which reads the stored blob and reports
			// what is wrong with it.
			c.releaseFold()
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
func (c *committer) releaseFold() {
	w := c.w
	if len(c.folding) == 0 {
		return
	}
	w.claims.release(c.folding...)
	c.folding = nil
}
