package shard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// Protocol v2's committer: a commit is the create of log position last+1,
// and its appends are acknowledged when that create lands (issue 21,
// sections 1-3). There is no manifest read or write on this path: the
// checkpointer (checkpoint.go) writes the manifest beside it.
//
// A batch is frozen at its position: every try of its create sends the
// same bytes with the same put id, and a position is never given other
// bytes while a create of this writer may still land there. A create whose
// outcome stays undecided therefore stops the writer (its appends learn
// ErrOutcomeUnknown, the queued ones ErrStale), and the writer set opens a
// replacement, which fences the log and inherits whatever landed.

// runLog is the committer of a protocol v2 writer.
func (c *committer) runLog() {
	w := c.w
	defer close(c.done)
	// The writer ends here, with its last create answered or abandoned:
	// tell the process's next writer of the shard whether it must fence.
	defer func() { w.opts.Lineage.end(w.shard, w.id, w.claimed && !c.inDoubt) }()
	for {
		batch, ok := c.takeLog()
		if !ok {
			return
		}
		c.commitLog(batch)
	}
}

// takeLog waits for queued appends and takes as many as fit one batch.
// It reports false once the writer is aborted or fenced, or closing with
// nothing queued.
func (c *committer) takeLog() ([]*pending, bool) {
	w := c.w
	for {
		w.mu.Lock()
		switch {
		case w.state == stateAborted || w.state == stateFenced:
			w.mu.Unlock()
			return nil, false
		case len(w.queue) > 0:
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
			w.mu.Unlock()
			endQueueWaits(batch)
			return batch, true
		case w.state == stateClosing:
			w.mu.Unlock()
			return nil, false
		}
		w.mu.Unlock()
		select {
		case <-c.kick:
		case <-w.ctx.Done():
		}
	}
}

// commitLog commits one batch at the next log position and settles its
// appends.
func (c *committer) commitLog(batch []*pending) {
	w := c.w
	// batch is the committer's own (takeLog copied it out of the queue):
	// live keeps its array rather than growing one of its own.
	live := batch[:0]
	var size int64
	for _, p := range batch {
		size += p.bytes
		if p.ctx.Err() != nil {
			w.settle(p, nil, errWithdrawn)
			continue
		}
		live = append(live, p)
	}
	defer w.merger.wake()
	if len(live) == 0 {
		w.mu.Lock()
		w.queued -= size
		w.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.CommitTimeout)
	defer cancel()
	ctx, span := w.startCommit(ctx, live)
	b, err := c.createBatch(ctx, live)
	endSpan(span, err)
	c.landBatch(live, size, b, err)
}

// landedBatch is a batch whose create landed: its log position and bytes, and
// the results of its appends' entries, in order (encodeBatch).
type landedBatch struct {
	pos     uint64
	l       format.Layout
	results []Result
}

// createBatch writes live as the batch at the next log position.
func (c *committer) createBatch(ctx context.Context, live []*pending) (landedBatch, error) {
	w := c.w
	pos, seq, err := c.awaitCheckpointRoom(ctx)
	if err != nil {
		return landedBatch{}, err
	}
	putID := w.nextPutID()
	l, results, err := c.encodeBatch(live, pos, seq, putID)
	if err != nil {
		return landedBatch{}, err
	}
	// From here until the create is decided, a create of this writer may
	// land at pos: runLog's Lineage.end reads inDoubt, and only an
	// undecided create leaves it set.
	c.inDoubt = true
	res, err := w.createAt(ctx, pos, l.Data, putID)
	switch {
	case err != nil && errors.Is(err, errUndecided):
		return landedBatch{}, c.haltUndecided(err)
	case err != nil:
		c.inDoubt = false
		return landedBatch{}, c.notCreated(err)
	}
	c.inDoubt = false
	if res.outcome == taken {
		return landedBatch{}, c.positionTaken(pos, res.found)
	}
	return landedBatch{pos: pos, l: l, results: results}, nil
}

// encodeBatch encodes live's entries as the batch at log position pos,
// numbered from seq, and returns the results of every entry of live, in
// order (finishAll hands each append its own run of them). The bytes are
// frozen here: every try of the create sends them unchanged.
func (c *committer) encodeBatch(live []*pending, pos, seq uint64, putID string) (format.Layout, []Result, error) {
	w := c.w
	var hint int64
	n := 0
	for _, p := range live {
		hint += p.bytes
		n += len(p.entries)
	}
	b := format.NewLogBatchBuilder(format.LogEntry{Shard: w.shard, Epoch: w.epoch, Position: pos, Writer: w.id, PutID: putID, Created: w.opts.Clock.Now().UnixNano()}, int(hint))
	// One array for the whole batch: a group commit of many appends
	// would otherwise allocate once for each.
	results := make([]Result, 0, n)
	// A record is stored as its prepared bytes followed by its seq; the
	// builder takes the two parts, so the record is copied once.
	var suffix [1 + binary.MaxVarintLen64]byte
	for _, p := range live {
		for _, e := range p.entries {
			b.AddSuffixed(e.ID, seq, e.Data, seqField(suffix[:0], seq), e.ClientHash)
			results = append(results, Result{ID: e.ID, Seq: seq, Epoch: w.epoch, Generation: pos})
			seq++
		}
	}
	l, err := b.Finish()
	if err != nil {
		return format.Layout{}, nil, err
	}
	return l, results, nil
}

// haltUndecided stops the writer after a create that neither landed nor
// failed, and returns the error of the batch's appends.
func (c *committer) haltUndecided(err error) error {
	w := c.w
	// The create may land yet, at a position this writer can never
	// give other bytes: stop, and let a replacement fence the log.
	werr := fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	if w.ctx.Err() != nil {
		werr = fmt.Errorf("shard %q epoch %d: aborted while its commit was in flight: %w", w.shard, w.epoch, werr)
	}
	refuse := w.staleErr(fmt.Errorf("a commit before this append's is undecided: %w", err))
	if errors.Is(err, blob.ErrStoreFailed) {
		// A failed store refuses every call until a restart: the
		// appends refused here must say so, not only that they
		// were not sent.
		refuse = fmt.Errorf("%w: %w", refuse, blob.ErrStoreFailed)
	}
	w.halt(werr, refuse)
	return werr
}

// notCreated returns the error of a batch whose create is known not to
// have landed, stopping the writer if the create found it stale.
func (c *committer) notCreated(err error) error {
	w := c.w
	if errors.Is(err, ErrStale) {
		w.halt(err, err)
	}
	if w.ctx.Err() != nil {
		return fmt.Errorf("shard %q epoch %d: %w before the commit was sent", w.shard, w.epoch, ErrAborted)
	}
	return err
}

// positionTaken stops the writer when another writer's entry f holds the
// log position pos its batch was created at, and returns why.
func (c *committer) positionTaken(pos uint64, f *shardlog.Entry) error {
	w := c.w
	if f.Epoch > w.epoch {
		fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: f.Epoch}
		w.fence(fe)
		return fe
	}
	// A lower epoch's entry: an earlier writer's create that landed
	// late. It is part of the log, and this batch's seqs follow what
	// was there before it: the writer moves past it by being replaced,
	// whose open reads it, and the appends are retried there.
	err := w.staleErr(fmt.Errorf("log position %d holds a late entry of epoch %d", pos, f.Epoch))
	w.log.Warn("late landing of an earlier epoch's create in the log", zap.Uint64("position", pos), zap.Uint64("stored_epoch", f.Epoch))
	w.halt(err, err)
	return err
}

// landBatch ends the commit of live, whose appends' bytes were size. A
// batch b that landed (err nil) joins the writer's tail in the same hold
// of mu in which the appends' bytes leave the queue and their ids leave
// inflight, and followers are told, and a checkpoint called for once K
// positions wait for one, before any append learns its outcome: an acked
// caller finds its ids committed, never still counted as queued.
func (c *committer) landBatch(live []*pending, size int64, b landedBatch, err error) {
	w := c.w
	var e *shardlog.Entry
	var now int64
	if err == nil {
		now = w.opts.Clock.Now().UnixNano()
		e = w.source().EntryOf(b.pos, b.l, now)
	}
	w.mu.Lock()
	if e != nil {
		w.written.add(e, b.l.Footer.GetEntries())
		w.addTailLocked(e, now)
	}
	lag := len(w.tail)
	w.queued -= size
	w.forgetAllLocked(live)
	w.mu.Unlock()
	if e != nil {
		w.opts.Notifier.Publish(w.shard)
		if lag >= w.opts.CheckpointEvery {
			w.checkpointer.wake()
		}
	}
	finishAll(live, b.results, err)
}

// awaitCheckpointRoom holds the commit while the next position would be
// more than 2K past the checkpoint, so that a failing or slow checkpoint
// cannot let the uncheckpointed tail grow: readers and the next claim
// probe at most that many positions. Nothing is sent yet. It returns the
// next position and the seq its batch starts at, read in the hold of mu
// that found room.
func (c *committer) awaitCheckpointRoom(ctx context.Context) (pos, seq uint64, _ error) {
	w := c.w
	for {
		w.mu.Lock()
		room := w.last+1 <= w.ckpt.GetLogCheckpoint()+2*uint64(w.opts.CheckpointEvery)
		landed := w.ckptLanded
		pos, seq = w.last+1, w.m.GetNextSeq()
		w.mu.Unlock()
		if room {
			return pos, seq, nil
		}
		w.checkpointer.wake()
		select {
		case <-landed:
		case <-w.halted:
			// No checkpoint of this writer's will land: fenced by the
			// checkpointer, say. Nothing was sent; the writer's own reason
			// tells the caller where to go (a fence: to a new writer).
			w.mu.Lock()
			err := w.refuseLocked()
			w.mu.Unlock()
			return 0, 0, err
		case <-ctx.Done():
			if w.ctx.Err() != nil {
				return 0, 0, fmt.Errorf("shard %q epoch %d: %w before the commit was sent", w.shard, w.epoch, ErrAborted)
			}
			return 0, 0, fmt.Errorf("shard %q: no checkpoint landed while %d log positions waited for one (%w): %w", w.shard, 2*w.opts.CheckpointEvery, blob.ErrUnavailable, ctx.Err())
		}
	}
}
