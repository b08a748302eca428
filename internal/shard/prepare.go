package shard

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// prepare writes the batch's new entries as a generation blob and builds the
// manifest that commits it and the edits.
func (c *committer) prepare(ctx context.Context, batch []*pending, edits []*edit, present map[string]found) (attempt, *storagepb.Manifest, error) {
	w := c.w
	cur := w.m
	now := w.opts.Clock.Now().UnixNano()
	next := proto.CloneOf(cur)
	a := attempt{out: commitOut{results: map[*pending][]Result{}, errs: map[*pending]error{}, editErrs: map[*edit]error{}}}
	changed := false
	for _, e := range edits {
		if err := e.apply(next, now); err != nil {
			a.out.editErrs[e] = err
			continue
		}
		changed = true
		if e.merge != nil {
			a.marker = e.merge.output.GetNumber()
		}
	}

	// Entries found committed after a resync are acknowledged as present,
	// not written again.
	var size, fresh int
	for _, p := range batch {
		rs := make([]Result, len(p.entries))
		for i, e := range p.entries {
			f, ok := present[e.ID]
			switch {
			case !ok:
				size += len(e.Data) + 16
				fresh++
				continue
			case f.entry.GetClientHash() != e.ClientHash:
				a.out.errs[p] = &IDConflictError{Shard: w.shard, ID: e.ID, Seq: f.entry.GetSeq()}
			}
			rs[i] = Result{ID: e.ID, Seq: f.entry.GetSeq(), Epoch: f.gen.GetEpoch(), Generation: f.gen.GetNumber(), AlreadyPresent: true}
		}
		a.out.results[p] = rs
	}
	if fresh > 0 {
		type add struct {
			p *pending
			i int
		}
		var adds []add
		for _, p := range batch {
			if a.out.errs[p] != nil {
				continue
			}
			for i, e := range p.entries {
				if _, ok := present[e.ID]; !ok {
					adds = append(adds, add{p, i})
				}
			}
		}
		if len(adds) > 0 {
			// The fold stays within what one generation may hold.
			fold := c.pickFold(next, min(w.opts.FoldMaxBytes, w.opts.MaxGenerationBytes-int64(size)))
			if fold != nil {
				size += fold.bytes
			}
			gen := w.allocGen()
			seq := cur.GetNextSeq()
			b := format.NewGenerationBuilder(w.shard, w.epoch, gen, size)
			first, level := seq, uint32(0)
			if fold != nil {
				addSources(b, fold.footers, fold.datas)
				first, level = fold.gens[0].GetFirstSeq(), fold.level+1
			}
			var scratch []byte
			for _, ad := range adds {
				e := ad.p.entries[ad.i]
				scratch = e.withSeq(scratch[:0], seq)
				b.Add(e.ID, seq, scratch, e.ClientHash)
				a.out.results[ad.p][ad.i] = Result{ID: e.ID, Seq: seq, Epoch: w.epoch, Generation: gen}
				seq++
			}
			g, err := w.writeGeneration(ctx, gen, b, first, seq-1, level, now)
			if err != nil {
				return a, nil, fmt.Errorf("shard %q: %w", w.shard, err)
			}
			if fold != nil {
				// The folded generations are the newest live ones, so the
				// new generation takes their place at the end.
				keep := len(next.Generations) - len(fold.gens)
				retire(next, next.Generations[keep:], now)
				next.Generations = append(next.Generations[:keep:keep], g)
				a.out.fold = fold
			} else {
				next.Generations = append(next.Generations, g)
			}
			next.NextSeq = seq
			next.RecordCount += uint64(len(adds))
			a.marker = gen
		}
	}
	if !changed && a.marker == 0 {
		return a, nil, nil // every entry was already present: nothing to commit
	}
	w.mu.Lock()
	next.NextGeneration = max(next.GetNextGeneration(), w.minGen)
	w.mu.Unlock()
	if a.marker != 0 {
		epochRecord(next, w.epoch).LastGeneration = a.marker
	}
	next.UpdatedUnixNanos = now
	next.CommitId = w.nextPutID()
	return a, next, nil
}
