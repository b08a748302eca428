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

	// It has no lock of its own: the fields above are set by Open, and
	// what it shares with the committer (ckpt, tail, last, edits, m) is
	// under writer.mu (state.go).
	//
	// Only the checkpointer goroutine touches it: a checkpoint's CAS went
	// out and its outcome is unknown; the next one re-reads the manifest
	// first.
	unsure bool
	// enc keeps the encodings of the generations of the last checkpoint,
	// which the next one mostly lists again.
	enc format.ManifestEncoder
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

// loop is the checkpointer's goroutine. It exits after the last checkpoint
// at Close, or when the writer is aborted or fenced, failing the edits
// that still wait.
func (c *checkpointer) loop() {
	w := c.w
	defer close(c.done)
	for {
		closing, ok := c.awaitDue()
		// The committer is draining the queue when closing; what it
		// commits is checkpointed below, after it is done.
		if ok && closing {
			ok = c.awaitDrained()
		}
		if ok {
			w.mu.Lock()
			ok = w.state != stateAborted && w.state != stateFenced
			w.mu.Unlock()
		}
		if !ok {
			c.dropEdits(ErrAborted)
			return
		}
		c.tryCheckpoint(closing)
		if closing {
			return
		}
	}
}

// awaitDue waits until a checkpoint may be due or the writer closes, which
// it reports as closing. It reports false once the writer is aborted.
// Each wake-up is checked against the writer's state, since a wake-up
// may come late or from a state that has moved on.
func (c *checkpointer) awaitDue() (closing, ok bool) {
	w := c.w
	for {
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
			return true, true
		case <-w.ctx.Done():
			return false, false
		}
		return false, true
	}
}

// awaitDrained waits, once the writer is closing, for the committer to
// finish. Until it is done, it keeps checkpointing when asked: the
// committer may be waiting for one at the 2K lag bound. It reports false
// if the writer is aborted meanwhile.
func (c *checkpointer) awaitDrained() bool {
	w := c.w
	for {
		select {
		case <-w.committer.done:
			return true
		case <-c.kick:
			c.tryCheckpoint(false)
		case <-w.ctx.Done():
			return false
		}
	}
}

// tryCheckpoint writes one checkpoint, if anything waits for one, within
// CommitTimeout. A failure is only logged: checkpoint has acted on it (a
// fence stops the writer; an unclear outcome is re-read first next time),
// and what it left unwritten waits for the next checkpoint.
func (c *checkpointer) tryCheckpoint(closing bool) {
	w := c.w
	ctx, cancel := context.WithTimeout(w.ctx, w.opts.CommitTimeout)
	defer cancel()
	if err := c.checkpoint(ctx, closing); err != nil && w.ctx.Err() == nil {
		w.log.Warn("checkpoint failed; will retry", zap.Error(err))
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
	through, next, etag, edits, pending := c.takeDue(closing)
	if !pending {
		return nil
	}
	if w.opts.Tracer != nil {
		var span trace.Span
		ctx, span = w.startCheckpoint(ctx)
		defer func() { endSpan(span, err) }()
	}
	settle := applyEdits(edits, next, w.opts.Clock.Now().UnixNano())
	err = c.put(ctx, next, etag, through)
	settle(err)
	return err
}

// takeDue builds the next checkpoint, through the last position that
// landed, if anything waits for one, and takes the edits it carries.
// Everything is read under one hold of mu, so the checkpoint, the etag it
// replaces and the edits applied to it are of one view.
func (c *checkpointer) takeDue(closing bool) (through uint64, next *storagepb.Manifest, etag blob.ETag, edits []*edit, pending bool) {
	w := c.w
	w.mu.Lock()
	defer w.mu.Unlock()
	through, etag = w.last, w.etag
	pressed := len(w.m.GetGenerations()) >= w.opts.mergePolicy().countTrigger()
	pending = through > w.ckpt.GetLogCheckpoint() ||
		(len(w.edits) > 0 && (closing || pressed || w.editsDueLocked() <= 0))
	if !pending {
		return through, nil, etag, nil, false
	}
	edits, w.edits = w.edits, nil
	return through, w.checkpointOf(w.m, through), etag, edits, true
}

// applyEdits applies edits to next, the checkpoint that carries them, and
// returns how to settle them once its fate is known. An edit that no
// longer applies does not hold back the others; it learns its own error
// if the checkpoint landed, and, like every edit, the checkpoint's error
// if it did not.
func applyEdits(edits []*edit, next *storagepb.Manifest, now int64) func(error) {
	errs := map[*edit]error{}
	for _, e := range edits {
		if err := e.apply(next, now); err != nil {
			errs[e] = err
		}
	}
	return func(err error) {
		for _, e := range edits {
			if err != nil {
				e.settle(err)
			} else {
				e.settle(errs[e])
			}
		}
	}
}

// put CASes next over the manifest of etag, retrying while the store is
// unavailable, and lands it if it landed.
func (c *checkpointer) put(ctx context.Context, next *storagepb.Manifest, etag blob.ETag, through uint64) error {
	w := c.w
	data, err := c.enc.Encode(next)
	if err != nil {
		return err
	}
	name := format.ManifestName(w.shard)
	// The commit id is the put id: a retry after a lost answer that
	// landed succeeds with that try's etag instead of failing IfMatch.
	opts := blob.PutOptions{IfMatch: etag, PutID: next.GetCommitId()}
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	for {
		attrs, err := w.store.Put(ctx, name, data, opts)
		if err == nil {
			c.land(next, attrs.ETag, through)
			return nil
		}
		if errors.Is(err, blob.ErrUnavailable) && b.Wait(ctx) == nil {
			continue
		}
		return c.decide(ctx, next, through, err)
	}
}

// decide learns from the stored manifest what became of next, whose put
// failed with err or left its outcome unclear: landed after all, fenced by
// a newer epoch, or lost to one of this writer's own earlier checkpoints.
func (c *checkpointer) decide(ctx context.Context, next *storagepb.Manifest, through uint64, err error) error {
	w := c.w
	m, metag, rerr := shardlog.ReadManifest(ctx, w.store, w.shard)
	switch {
	case rerr != nil:
		// Still unclear: the next checkpoint re-reads before it builds.
		c.unsure = true
		return fmt.Errorf("shard %q epoch %d: checkpoint through %d: %w, and re-reading the manifest: %w", w.shard, w.epoch, through, err, rerr)
	case m.GetCommitId() == next.GetCommitId():
		c.land(m, metag, through)
		return nil
	case m.GetEpoch() != w.epoch:
		fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
		w.fence(fe)
		return fe
	default:
		c.adopt(m, metag)
		return fmt.Errorf("shard %q epoch %d: checkpoint through %d: %w", w.shard, w.epoch, through, err)
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
