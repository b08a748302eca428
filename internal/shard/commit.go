package shard

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// attempt is one try at a commit. marker is the generation whose presence
// proves the attempt landed: the batch's new generation, else a merge's
// output; 0 when the commit only forgets retired generations, which is safe
// to repeat.
type attempt struct {
	marker uint64
	out    commitOut
}

// commitOut is what a landed commit gives its appends and edits.
type commitOut struct {
	results  map[*pending][]Result
	errs     map[*pending]error
	editErrs map[*edit]error
	fold     *foldRun // the generations the commit folded, if any
}

// maxRebases bounds how often one batch is rebuilt on a newer manifest of
// the same epoch before the commit is reported as failed.
const maxRebases = 3

// commitBatch writes the batch's new records as one generation and CASes
// the manifest to add it, together with the edits. It returns only once
// that CAS is known to have landed, or with the reason it did not. Once an
// attempt's CAS was sent, every failure to decide it matches
// ErrOutcomeUnknown: that attempt may still land.
func (w *writer) commitBatch(ctx context.Context, batch []*pending, edits []*edit) (commitOut, error) {
	var attempts []attempt
	present := map[string]found{}
	for rebase := 0; ; rebase++ {
		if w.stale {
			out, err := w.resync(ctx, attempts)
			if err != errRebase {
				return out, err
			}
		}
		if err := w.recheck(ctx, batch, present); err != nil {
			return commitOut{}, w.unsure(attempts, err)
		}
		a, next, err := w.prepare(ctx, batch, edits, present)
		if err != nil {
			if w.ctx.Err() != nil && len(attempts) == 0 {
				return commitOut{}, fmt.Errorf("shard %q epoch %d: %w before the commit was sent", w.shard, w.epoch, ErrAborted)
			}
			return commitOut{}, w.unsure(attempts, err)
		}
		if next == nil {
			return a.out, nil
		}
		attempts = append(attempts, a)
		name := format.ManifestName(w.shard)
		opts := blob.PutOptions{IfMatch: w.etag, PutID: next.GetCommitId()}
		data, err := format.EncodeManifest(next)
		if err != nil {
			return commitOut{}, w.unsure(attempts[:len(attempts)-1], err)
		}
		attrs, err := w.store.Put(ctx, name, data, opts)
		for b := newBackoff(w.opts); err != nil && errors.Is(err, blob.ErrUnavailable); {
			// Known not applied: retry the same CAS (same put id).
			if b.wait(ctx) != nil {
				break
			}
			attrs, err = w.store.Put(ctx, name, data, opts)
		}
		if err == nil {
			w.setManifest(next, attrs.ETag)
			w.opts.Notifier.Publish(w.shard)
			return a.out, nil
		}
		// The CAS lost, or its outcome is unclear. Only the stored manifest
		// can say which attempt, if any, landed.
		out, err := w.resolve(ctx, attempts, err)
		if err != errRebase {
			return out, err
		}
		if rebase == maxRebases {
			return commitOut{}, fmt.Errorf("shard %q epoch %d: manifest kept changing under this writer's own epoch: %w", w.shard, w.epoch, ErrOutcomeUnknown)
		}
	}
}

// unsure returns err, the failure of a commit of which attempts were sent,
// as ErrOutcomeUnknown when there are any: one of them may still land.
func (w *writer) unsure(attempts []attempt, err error) error {
	if len(attempts) == 0 || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return fmt.Errorf("shard %q epoch %d: an earlier try of this commit was sent and may still land (%w): %w", w.shard, w.epoch, ErrOutcomeUnknown, err)
}

// errRebase: the manifest proves no attempt landed and this writer still
// owns the shard, so the batch is committed again on the current manifest.
var errRebase = errors.New("rebase")

// prepare writes the batch's new entries as a generation blob and builds the
// manifest that commits it and the edits.
func (w *writer) prepare(ctx context.Context, batch []*pending, edits []*edit, present map[string]found) (attempt, *storagepb.Manifest, error) {
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
			fold := w.pickFold(next, min(w.opts.FoldMaxBytes, w.opts.MaxGenerationBytes-int64(size)))
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

// resolve decides an unclear or lost manifest CAS by re-reading the
// manifest (see decide). It returns errRebase when this writer still owns
// the shard and no attempt landed.
func (w *writer) resolve(ctx context.Context, attempts []attempt, casErr error) (commitOut, error) {
	b := newBackoff(w.opts)
	for ctx.Err() == nil {
		m, etag, err := readManifest(ctx, w.store, w.shard)
		if err != nil {
			if retryable(err) && b.wait(ctx) == nil {
				continue
			}
			break
		}
		if out, ok, err := w.decide(m, etag, attempts); ok {
			return out, err
		}
		w.log.Warn("manifest changed under this writer's own epoch; rebasing the commit",
			zap.Uint64("generation", attempts[len(attempts)-1].marker), zap.Error(casErr))
		// What changed may be an earlier, unclear commit of this writer
		// that landed late, holding some of the batch's ids: resync looks
		// them up in every generation this writer has not seen, so the
		// rebased commit does not store them twice.
		w.stale = true
		return commitOut{}, errRebase
	}
	w.stale = true
	if w.ctx.Err() != nil {
		return commitOut{}, fmt.Errorf("shard %q epoch %d: aborted while its commit was in flight: %w", w.shard, w.epoch, ErrOutcomeUnknown)
	}
	return commitOut{}, fmt.Errorf("shard %q epoch %d: manifest CAS failed (%w) and the manifest could not be re-read: %w", w.shard, w.epoch, casErr, ErrOutcomeUnknown)
}

// decide says what m, a manifest read after every one of attempts was
// sent, proves about them: the commit landed if any attempt's marker
// generation did; it cannot be decided if this epoch's record was pruned;
// the writer is fenced if a higher epoch holds the shard and none landed
// (a claim changed the manifest's ETag, so none ever can). ok is false
// when m proves nothing but that this writer still owns the shard.
func (w *writer) decide(m *storagepb.Manifest, etag blob.ETag, attempts []attempt) (out commitOut, ok bool, err error) {
	for i := len(attempts) - 1; i >= 0; i-- {
		if attempts[i].marker == 0 {
			continue
		}
		switch commitStatus(m, w.epoch, attempts[i].marker) {
		case committed:
			w.opts.Notifier.Publish(w.shard)
			if m.GetEpoch() == w.epoch {
				w.adopt(m, etag)
			} else {
				// Committed, then another writer claimed the shard: the
				// ack stands, and the next commit finds the fence.
				w.stale = true
			}
			return attempts[i].out, true, nil
		case undecidable:
			w.stale = true
			return commitOut{}, true, fmt.Errorf("shard %q: commit of generation %d by epoch %d cannot be decided: epoch records pruned by epoch %d: %w", w.shard, attempts[i].marker, w.epoch, m.GetEpoch(), ErrOutcomeUnknown)
		}
	}
	if m.GetEpoch() != w.epoch {
		return commitOut{}, true, &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
	}
	return commitOut{}, false, nil
}

// resync re-reads the manifest before a commit when this writer's copy may
// be out of date (after an unclear or lost CAS), and decides the batch's
// earlier attempts on it (see decide). It returns errRebase when the batch
// is to be committed on the manifest it read, which it adopts: recheck then
// finds which of the queued ids a landed commit had already stored.
func (w *writer) resync(ctx context.Context, attempts []attempt) (commitOut, error) {
	m, etag, err := readManifest(ctx, w.store, w.shard)
	if err != nil {
		return commitOut{}, w.unsure(attempts, fmt.Errorf("shard %q: re-read manifest: %w", w.shard, err))
	}
	if out, ok, err := w.decide(m, etag, attempts); ok {
		return out, err
	}
	w.adopt(m, etag)
	w.stale = false
	return commitOut{}, errRebase
}

// recheck looks the ids of each append of batch up in the generations of
// the writer's manifest that the append did not look them up in itself,
// when a manifest was adopted since (see adopt): an append checks its ids
// against the writer's manifest when it is queued, and a commit of unclear
// outcome that landed after all may hold them. Ids found are acknowledged
// as present, not stored again.
func (w *writer) recheck(ctx context.Context, batch []*pending, present map[string]found) error {
	m, adopted := w.m, w.adopted // the committer is the only one that changes them
	for _, p := range batch {
		if p.adopted == adopted {
			continue
		}
		seen := map[uint64]bool{}
		for _, g := range p.checked.GetGenerations() {
			seen[g.GetNumber()] = true
		}
		var added []*storagepb.Generation
		for _, g := range m.GetGenerations() {
			if !seen[g.GetNumber()] {
				added = append(added, g)
			}
		}
		ids := make([]string, len(p.entries))
		for i, e := range p.entries {
			ids[i] = e.ID
		}
		if err := lookupCommitted(ctx, w.store, w.opts.Cache, w.shard, added, ids, present); err != nil {
			if errors.Is(err, blob.ErrNotFound) {
				err = w.staleErr(err)
			}
			return err
		}
		p.checked, p.adopted = m, adopted
	}
	return nil
}
