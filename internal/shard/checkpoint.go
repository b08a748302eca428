package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// checkpointer is protocol v2's manifest writer (issue 21, section 6). Off
// the ack path, it CASes the manifest to record everything up to the last
// log position that landed: the batches as live generations, with the
// edits of merges and GC. It checkpoints when CheckpointEvery positions
// wait, every CheckpointInterval while any does, and last when the writer
// closes. Checkpoints only move forward: each is built from the writer's
// view, which holds the last one.
type checkpointer struct {
	w       *writer
	kick    chan struct{} // capacity 1: checkpoint now
	retime  chan struct{} // capacity 1: an edit arrived; time its wait
	closing chan struct{} // closed by Close: checkpoint what is left, then exit
	once    sync.Once
	done    chan struct{}

	// Only the checkpointer goroutine touches it: a checkpoint's CAS went
	// out and its outcome is unknown; the next one re-reads the manifest
	// first.
	unsure bool
}

func (c *checkpointer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// editArrived tells the checkpointer to time a new edit's wait.
func (c *checkpointer) editArrived() {
	select {
	case c.retime <- struct{}{}:
	default:
	}
}

// close asks for the last checkpoint, once the committer has drained.
func (c *checkpointer) close() { c.once.Do(func() { close(c.closing) }) }

func (c *checkpointer) loop() {
	w := c.w
	defer close(c.done)
	for {
		closing := false
		w.mu.Lock()
		wait := c.dueLocked()
		w.mu.Unlock()
		select {
		case <-c.kick:
			// Commits call for a checkpoint at K waiting positions, each
			// of them until one lands: a call left over from before the
			// last one landed is no call for another.
			w.mu.Lock()
			stale := len(w.tail) < w.opts.CheckpointEvery && w.state == stateOpen
			w.mu.Unlock()
			if stale {
				continue
			}
		case <-c.retime:
			// Merges land with checkpoints; when generations pile up
			// faster than a checkpoint every K commits lets merges remove
			// them, a merge's edit calls for its own.
			w.mu.Lock()
			pressed := len(w.m.GetGenerations()) >= w.opts.mergePolicy().countTrigger()
			w.mu.Unlock()
			if !pressed {
				continue
			}
		case <-w.opts.Clock.After(wait):
			// Woken by the time it computed, which a commit since may
			// have left early for the tail that commit started.
			w.mu.Lock()
			early := c.dueLocked() > 0
			w.mu.Unlock()
			if early {
				continue
			}
		case <-c.closing:
			closing = true
		case <-w.ctx.Done():
			c.dropEdits(ErrAborted)
			return
		}
		if closing {
			// The committer is draining the queue; what it commits is
			// checkpointed below. Until it is done, keep checkpointing when
			// asked: it may be waiting for one at the 2K lag bound.
			for drained := false; !drained; {
				select {
				case <-w.committer.done:
					drained = true
				case <-c.kick:
					ctx, cancel := context.WithTimeout(w.ctx, w.opts.CommitTimeout)
					if err := c.checkpoint(ctx, false); err != nil && w.ctx.Err() == nil {
						w.log.Warn("checkpoint failed; will retry", zap.Error(err))
					}
					cancel()
				case <-w.ctx.Done():
					c.dropEdits(ErrAborted)
					return
				}
			}
		}
		w.mu.Lock()
		st := w.state
		w.mu.Unlock()
		if st == stateAborted || st == stateFenced {
			c.dropEdits(ErrAborted)
			return
		}
		ctx, cancel := context.WithTimeout(w.ctx, w.opts.CommitTimeout)
		err := c.checkpoint(ctx, closing)
		cancel()
		if err != nil && w.ctx.Err() == nil {
			w.log.Warn("checkpoint failed; will retry", zap.Error(err))
		}
		if closing {
			return
		}
	}
}

// dueLocked returns how long the checkpointer may wait before the next
// checkpoint falls due by time. The tail's falls due CheckpointInterval
// after its oldest position landed: a tail that keeps growing is
// checkpointed by count first (K positions), so time only adds
// checkpoints for a tail that stays short. Edits of merges and GC ride
// the tail's checkpoint, which comes anyway, rather than calling for one
// of their own: a lone client pays a blob write per checkpoint, and one
// per merge would follow every merge. Only with no tail to ride do edits
// call for one themselves, after EditDelay. With neither, it looks again
// after an interval; a commit or an edit wakes it sooner. The caller
// holds mu.
func (c *checkpointer) dueLocked() time.Duration {
	w := c.w
	switch {
	case len(w.tail) > 0:
		age := w.opts.Clock.Now().Sub(time.Unix(0, w.tail[0].Added))
		return max(w.opts.CheckpointInterval-age, 0)
	case len(w.edits) > 0:
		return max(w.editsDueLocked(), 0)
	}
	return w.opts.CheckpointInterval
}

// dropEdits fails the edits waiting for a checkpoint that will not come.
func (c *checkpointer) dropEdits(err error) {
	w := c.w
	w.mu.Lock()
	edits := w.edits
	w.edits = nil
	w.mu.Unlock()
	for _, e := range edits {
		e.settle(err)
	}
}

// checkpoint writes one checkpoint, if anything waits for one.
// Edits alone wait EditDelay for one, unless the writer is closing.
func (c *checkpointer) checkpoint(ctx context.Context, closing bool) (err error) {
	w := c.w
	if c.unsure {
		if err := c.resync(ctx); err != nil {
			return err
		}
	}
	w.mu.Lock()
	through, view, etag := w.last, w.m, w.etag
	pressed := len(w.m.GetGenerations()) >= w.opts.mergePolicy().countTrigger()
	pending := through > w.ckpt.GetLogCheckpoint() ||
		(len(w.edits) > 0 && (closing || pressed || w.editsDueLocked() <= 0))
	var edits []*edit
	if pending {
		edits = w.edits
		w.edits = nil
	}
	var next *storagepb.Manifest
	if pending {
		next = w.checkpointOf(view, through)
	}
	w.mu.Unlock()
	if !pending {
		return nil
	}
	if w.opts.Tracer != nil {
		var span trace.Span
		ctx, span = w.startCheckpoint(ctx)
		defer func() { endSpan(span, err) }()
	}
	now := w.opts.Clock.Now().UnixNano()
	errs := map[*edit]error{}
	for _, e := range edits {
		if err := e.apply(next, now); err != nil {
			errs[e] = err
		}
	}
	settle := func(err error) {
		for _, e := range edits {
			if err != nil {
				e.settle(err)
			} else {
				e.settle(errs[e])
			}
		}
	}
	data, err := format.EncodeManifest(next)
	if err != nil {
		settle(err)
		return err
	}
	name := format.ManifestName(w.shard)
	opts := blob.PutOptions{IfMatch: etag, PutID: next.GetCommitId()}
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	for {
		attrs, err := w.store.Put(ctx, name, data, opts)
		if err == nil {
			c.land(next, attrs.ETag, through)
			settle(nil)
			return nil
		}
		if errors.Is(err, blob.ErrUnavailable) {
			if b.Wait(ctx) == nil {
				continue
			}
		}
		// Lost, or unclear: only the stored manifest can say.
		m, metag, rerr := shardlog.ReadManifest(ctx, w.store, w.shard)
		switch {
		case rerr != nil:
			c.unsure = true
			err = fmt.Errorf("shard %q epoch %d: checkpoint through %d: %w, and re-reading the manifest: %w", w.shard, w.epoch, through, err, rerr)
		case m.GetCommitId() == next.GetCommitId():
			c.land(m, metag, through)
			settle(nil)
			return nil
		case m.GetEpoch() != w.epoch:
			fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
			w.fence(fe)
			err = fe
		default:
			c.adopt(m, metag)
			err = fmt.Errorf("shard %q epoch %d: checkpoint through %d: %w", w.shard, w.epoch, through, err)
		}
		settle(err)
		return err
	}
}

// land makes next the writer's durable checkpoint.
func (c *checkpointer) land(next *storagepb.Manifest, etag blob.ETag, through uint64) {
	w := c.w
	w.mu.Lock()
	w.landLocked(next, etag, through)
	w.mu.Unlock()
	c.unsure = false
	w.ckpts.Add(1)
	if w.opts.OnCheckpoint != nil {
		w.opts.OnCheckpoint()
	}
	w.merger.wake()
}

// resync re-reads the manifest after a checkpoint of unknown outcome.
func (c *checkpointer) resync(ctx context.Context) error {
	w := c.w
	m, etag, err := shardlog.ReadManifest(ctx, w.store, w.shard)
	if err != nil {
		return fmt.Errorf("shard %q epoch %d: re-read the manifest: %w", w.shard, w.epoch, err)
	}
	if m.GetEpoch() != w.epoch {
		fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
		w.fence(fe)
		return fe
	}
	c.adopt(m, etag)
	return nil
}

// adopt makes m, a manifest of this writer's epoch read back (one of its
// own checkpoints whose answer was lost), the durable checkpoint.
func (c *checkpointer) adopt(m *storagepb.Manifest, etag blob.ETag) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.GetLogCheckpoint() < w.ckpt.GetLogCheckpoint() {
		return // an older one: the writer's is newer, and its etag is current
	}
	w.landLocked(m, etag, m.GetLogCheckpoint())
	c.unsure = false
}

// editsDueLocked returns how long the waiting edits may still wait for a
// checkpoint that positions call for before one is written for them alone.
func (w *writer) editsDueLocked() time.Duration {
	return w.opts.EditDelay - w.opts.Clock.Now().Sub(w.editsAt)
}
