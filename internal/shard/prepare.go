package shard

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// prepare writes the batch's new entries as a generation blob and builds the
// manifest that commits it and the edits.
func (c *committer) prepare(ctx context.Context, batch []*pending, edits []*edit, present map[string]shardlog.Found) (attempt, *storagepb.Manifest, error) {
	w := c.w
	cur := w.m
	now := w.opts.Clock.Now().UnixNano()
	next := proto.CloneOf(cur)
	a := attempt{out: commitOut{results: map[*pending][]Result{}, errs: map[*pending]error{}, editErrs: map[*edit]error{}}}
	changed := a.applyEdits(next, edits, now)
	if size, fresh := c.acknowledgePresent(&a, batch, present); fresh > 0 {
		if err := c.writeBatch(ctx, &a, next, batch, present, size, cur.GetNextSeq(), now); err != nil {
			return a, nil, err
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

// applyEdits makes the edits that still apply on next, and records why the
// others do not. It reports whether any applied.
func (a *attempt) applyEdits(next *storagepb.Manifest, edits []*edit, now int64) (changed bool) {
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
	return changed
}

// acknowledgePresent gives the appends of batch their results for the ids
// found committed after a resync, which are acknowledged as present, not
// written again; an id stored with other content fails its append with an
// *IDConflictError. It returns how many entries are fresh, and their size.
func (c *committer) acknowledgePresent(a *attempt, batch []*pending, present map[string]shardlog.Found) (size, fresh int) {
	for _, p := range batch {
		rs := make([]Result, len(p.entries))
		for i, e := range p.entries {
			f, ok := present[e.ID]
			switch {
			case !ok:
				size += int(e.size())
				fresh++
				continue
			case f.Entry.GetClientHash() != e.ClientHash:
				a.out.errs[p] = &IDConflictError{Shard: c.w.shard, ID: e.ID, Seq: f.Entry.GetSeq()}
			}
			rs[i] = Result{ID: e.ID, Seq: f.Entry.GetSeq(), Epoch: f.Gen.GetEpoch(), Generation: f.Gen.GetNumber(), AlreadyPresent: true}
		}
		a.out.results[p] = rs
	}
	return size, fresh
}

// writeBatch writes the fresh entries of the appends of batch that did not
// fail, numbered from seq on, as one new generation, together with the
// newest generations it folds (fold.go), and lists that generation in next
// in their place. size is the fresh entries' estimated size.
func (c *committer) writeBatch(ctx context.Context, a *attempt, next *storagepb.Manifest, batch []*pending, present map[string]shardlog.Found, size int, seq uint64, now int64) error {
	w := c.w
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
	if len(adds) == 0 {
		return nil
	}
	// The fold stays within what one generation may hold.
	fold := c.pickFold(next, min(w.opts.FoldMaxBytes, w.opts.MaxGenerationBytes-int64(size)))
	if fold != nil {
		size += fold.bytes
	}
	gen := w.allocGen()
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
		return fmt.Errorf("shard %q: %w", w.shard, err)
	}
	if fold != nil {
		// The folded generations are the newest live ones, so the new
		// generation takes their place at the end.
		keep := len(next.Generations) - len(fold.gens)
		retire(next, next.Generations[keep:], now)
		next.Generations = append(next.Generations[:keep:keep], g)
		a.out.fold = fold
	} else {
		next.Generations = append(next.Generations, g)
	}
	next.NextSeq = seq
	next.RecordCount += uint64(len(adds))
	next.LastCommitUnixNanos = now // lifecycle.go: DescribeShard's last commit
	a.marker = gen
	return nil
}
