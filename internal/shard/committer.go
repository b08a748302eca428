package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// committer is the committer goroutine's state. It alone writes the
// manifest: it takes the queued appends and waiting edits (take), commits
// them in one CAS (commit, commitBatch), and decides a CAS whose outcome is
// unclear from the manifest it reads back (resolve, resync), never from
// local belief.
type committer struct {
	w    *writer
	kick chan struct{} // wakes it; capacity 1
	done chan struct{} // closed when it has exited

	// Only the committer goroutine touches these; no lock.
	stale bool // the writer's manifest and etag must be re-read before the next commit
	// unresolved: a commit of this writer ended with its outcome unknown,
	// and no manifest read back since showed what it did. A batch may be
	// that commit's records, retried; until its ids are checked against a
	// manifest read back, its failure is ErrOutcomeUnknown too (fail).
	unresolved bool
	// inDoubt (protocol v2): a create of a log position went out and was
	// not answered, by its reply or a read of the position.
	inDoubt bool
	folding []genKey // the generations the commit being prepared claimed to fold (fold.go)
}

// wake tells the committer there is work, without blocking.
func (c *committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run is the committer: it commits everything queued, one generation at a
// time, until the writer is closed, aborted or fenced.
func (c *committer) run() {
	defer close(c.done)
	for {
		batch, edits, ok := c.take()
		if !ok {
			return
		}
		c.commit(batch, edits)
	}
}

// take waits for queued appends or manifest edits, and takes as many
// appends as fit one generation, and every edit.
func (c *committer) take() ([]*pending, []*edit, bool) {
	w := c.w
	for {
		w.mu.Lock()
		switch {
		case w.state == stateAborted || w.state == stateFenced:
			edits := w.edits
			w.edits = nil
			w.mu.Unlock()
			for _, e := range edits {
				e.settle(ErrAborted)
			}
			return nil, nil, false
		case len(w.queue) > 0 || (len(w.edits) > 0 && w.state == stateOpen && c.editsDueLocked() <= 0):
			var n int
			var size int64
			for n < len(w.queue) && (n == 0 || size+w.queue[n].bytes <= w.opts.MaxGenerationBytes) {
				size += w.queue[n].bytes
				w.queue[n].taken = true
				n++
			}
			batch := make([]*pending, n)
			copy(batch, w.queue)
			w.queue = append(w.queue[:0], w.queue[n:]...)
			edits := w.edits
			w.edits = nil
			w.mu.Unlock()
			endQueueWaits(batch)
			return batch, edits, true
		case w.state == stateClosing:
			// Close flushes what is already done: a merge whose output is
			// written, or deletes GC made, are committed rather than left
			// as orphans and stale entries for a later epoch to find.
			edits := w.edits
			w.edits = nil
			w.mu.Unlock()
			return nil, edits, len(edits) > 0
		}
		// Edits alone wait for an append's commit to ride on, up to
		// EditDelay: see Options.EditDelay.
		var due <-chan time.Time
		if len(w.edits) > 0 && w.state == stateOpen {
			due = w.opts.Clock.After(c.editsDueLocked())
		}
		w.mu.Unlock()
		select {
		case <-c.kick:
		case <-w.ctx.Done():
		case <-due:
		}
	}
}

// editsDueLocked returns how long the waiting edits may still wait for an
// append's commit before they are committed alone.
func (c *committer) editsDueLocked() time.Duration {
	w := c.w
	return w.opts.EditDelay - w.opts.Clock.Now().Sub(w.editsAt)
}

// commit commits one batch and the waiting manifest edits, and settles every
// pending append and edit in it.
func (c *committer) commit(batch []*pending, edits []*edit) {
	w := c.w
	// Appends whose callers gave up before the batch was taken are not sent.
	var live []*pending
	var size int64
	for _, p := range batch {
		size += p.bytes
		if p.ctx.Err() != nil {
			w.settle(p, nil, errWithdrawn)
			continue
		}
		live = append(live, p)
	}
	// The batch's bytes leave the queue before its appends learn their
	// outcome, so a caller that was acked never sees them counted.
	release := func() {
		w.mu.Lock()
		w.queued -= size
		w.mu.Unlock()
	}
	if len(live) > 0 || len(edits) > 0 {
		ctx, cancel := context.WithTimeout(w.ctx, w.opts.CommitTimeout)
		ctx, span := w.startCommit(ctx, live)
		out, err := c.commitBatch(ctx, live, edits)
		endSpan(span, err)
		cancel()
		c.releaseFold()
		release()
		if err == nil && out.fold != nil {
			w.folds.Add(1)
			w.merges.Add(1)
			if w.opts.OnMerge != nil {
				w.opts.OnMerge(len(out.fold.gens), int(out.fold.records()), 0)
			}
		}
		var fenced *FencedError
		if errors.As(err, &fenced) {
			w.fence(fenced)
		}
		for _, p := range live {
			if err != nil {
				w.settle(p, nil, err)
				continue
			}
			w.settle(p, out.results[p], out.errs[p])
		}
		for _, e := range edits {
			if err != nil {
				e.settle(err)
			} else {
				e.settle(out.editErrs[e])
			}
		}
	} else {
		release()
	}
	w.merger.wake()
}

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
func (c *committer) commitBatch(ctx context.Context, batch []*pending, edits []*edit) (commitOut, error) {
	w := c.w
	var attempts []attempt
	present := map[string]shardlog.Found{}
	for rebase := 0; ; rebase++ {
		if c.stale {
			out, err := c.resync(ctx, attempts)
			if err != errRebase {
				return out, err
			}
		}
		if err := c.recheck(ctx, batch, present); err != nil {
			// Some of the batch's ids were not checked against the
			// manifest adopted since they were queued, which may hold them.
			return commitOut{}, fmt.Errorf("shard %q epoch %d: could not check the batch's ids against the manifest read back (%w): %w", w.shard, w.epoch, ErrOutcomeUnknown, err)
		}
		a, next, err := c.prepare(ctx, batch, edits, present)
		if err != nil {
			return commitOut{}, c.fail(attempts, err)
		}
		if next == nil {
			return a.out, nil
		}
		attempts = append(attempts, a)
		name := format.ManifestName(w.shard)
		opts := blob.PutOptions{IfMatch: w.etag, PutID: next.GetCommitId()}
		data, err := format.EncodeManifest(next)
		if err != nil {
			return commitOut{}, c.unsure(attempts[:len(attempts)-1], err)
		}
		attrs, err := w.store.Put(ctx, name, data, opts)
		for b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff); err != nil && errors.Is(err, blob.ErrUnavailable); {
			// Known not applied: retry the same CAS (same put id).
			if b.Wait(ctx) != nil {
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
		out, err := c.resolve(ctx, attempts, err)
		if err != errRebase {
			return out, err
		}
		if rebase == maxRebases {
			c.unresolved = true
			return commitOut{}, fmt.Errorf("shard %q epoch %d: manifest kept changing under this writer's own epoch: %w", w.shard, w.epoch, ErrOutcomeUnknown)
		}
	}
}

// unsure returns err, the failure of a commit of which attempts were sent,
// as ErrOutcomeUnknown when there are any: one of them may still land.
func (c *committer) unsure(attempts []attempt, err error) error {
	w := c.w
	if len(attempts) == 0 || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	c.unresolved = true
	return fmt.Errorf("shard %q epoch %d: an earlier try of this commit was sent and may still land (%w): %w", w.shard, w.epoch, ErrOutcomeUnknown, err)
}

// fail is the error of a commit that failed before it was decided:
// ErrOutcomeUnknown when one of its tries was sent (unsure) or when an
// earlier commit's outcome is unresolved (its records may be this batch's,
// retried); ErrAborted when the writer was aborted before anything of it
// was sent; else err, and nothing of the batch was stored.
func (c *committer) fail(attempts []attempt, err error) error {
	w := c.w
	switch {
	case len(attempts) > 0 || errors.Is(err, ErrOutcomeUnknown):
		return c.unsure(attempts, err)
	case c.unresolved:
		return fmt.Errorf("shard %q epoch %d: an earlier commit's outcome is unresolved, and it may hold this batch's records (%w): %w", w.shard, w.epoch, ErrOutcomeUnknown, err)
	case w.ctx.Err() != nil:
		return fmt.Errorf("shard %q epoch %d: %w before the commit was sent", w.shard, w.epoch, ErrAborted)
	}
	return err
}

// errRebase: the manifest proves no attempt landed and this writer still
// owns the shard, so the batch is committed again on the current manifest.
var errRebase = errors.New("rebase")

// resolve decides an unclear or lost manifest CAS by re-reading the
// manifest (see decide). It returns errRebase when this writer still owns
// the shard and no attempt landed.
func (c *committer) resolve(ctx context.Context, attempts []attempt, casErr error) (commitOut, error) {
	w := c.w
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	for ctx.Err() == nil {
		m, etag, err := shardlog.ReadManifest(ctx, w.store, w.shard)
		if err != nil {
			if shardlog.Retryable(err) && b.Wait(ctx) == nil {
				continue
			}
			break
		}
		if out, ok, err := c.decide(m, etag, attempts); ok {
			return out, err
		}
		w.log.Warn("manifest changed under this writer's own epoch; rebasing the commit",
			zap.Uint64("generation", attempts[len(attempts)-1].marker), zap.Error(casErr))
		// What changed may be an earlier, unclear commit of this writer
		// that landed late, holding some of the batch's ids: resync looks
		// them up in every generation this writer has not seen, so the
		// rebased commit does not store them twice.
		c.stale = true
		return commitOut{}, errRebase
	}
	c.stale, c.unresolved = true, true
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
func (c *committer) decide(m *storagepb.Manifest, etag blob.ETag, attempts []attempt) (out commitOut, ok bool, err error) {
	w := c.w
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
				c.stale = true
			}
			return attempts[i].out, true, nil
		case undecidable:
			c.stale, c.unresolved = true, true
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
func (c *committer) resync(ctx context.Context, attempts []attempt) (commitOut, error) {
	w := c.w
	m, etag, err := shardlog.ReadManifest(ctx, w.store, w.shard)
	if err != nil {
		return commitOut{}, c.fail(attempts, fmt.Errorf("shard %q: re-read manifest: %w", w.shard, err))
	}
	if out, ok, err := c.decide(m, etag, attempts); ok {
		if errors.Is(err, ErrFenced) && len(attempts) == 0 && c.unresolved {
			// The unresolved commit may have landed before the claim.
			err = fmt.Errorf("shard %q epoch %d: an earlier commit's outcome is unresolved, and it may hold this batch's records (%w): %w", w.shard, w.epoch, ErrOutcomeUnknown, err)
		}
		return out, err
	}
	w.adopt(m, etag)
	c.stale, c.unresolved = false, false
	return commitOut{}, errRebase
}

// recheck looks the ids of each append of batch up in the generations of
// the writer's manifest that the append did not look them up in itself,
// when a manifest was adopted since (see adopt): an append checks its ids
// against the writer's manifest when it is queued, and a commit of unclear
// outcome that landed after all may hold them. Ids found are acknowledged
// as present, not stored again.
func (c *committer) recheck(ctx context.Context, batch []*pending, present map[string]shardlog.Found) error {
	w := c.w
	m, adopted := w.m, w.adopted // the committer is the only one that changes them
	for _, p := range batch {
		if p.adopted == adopted {
			continue
		}
		seen := map[genKey]bool{}
		for _, g := range p.checked.GetGenerations() {
			seen[keyOf(g)] = true
		}
		var added []*storagepb.Generation
		for _, g := range m.GetGenerations() {
			if !seen[keyOf(g)] {
				added = append(added, g)
			}
		}
		ids := make([]string, len(p.entries))
		for i, e := range p.entries {
			ids[i] = e.ID
		}
		if err := shardlog.LookupCommitted(ctx, w.store, w.opts.Cache, w.shard, added, ids, present); err != nil {
			if errors.Is(err, blob.ErrNotFound) {
				err = w.staleErr(err)
			}
			return err
		}
		p.checked, p.adopted = m, adopted
	}
	return nil
}
