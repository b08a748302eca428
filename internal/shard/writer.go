package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Writer is the resident writer of one shard. It is safe for concurrent use.
//
// Writer is a handle: the committer goroutine holds only the inner state, so
// a Writer that its owner drops without Close or Abort becomes unreachable,
// and a cleanup then aborts it (logging a warning) instead of leaking it.
type Writer struct {
	w *writer
}

// Open claims the next epoch of shard and returns its resident writer. The
// shard must be valid (package validate). A lost claim is retried until this
// writer holds an epoch or ctx ends; fencing is only reported at commit time.
func Open(ctx context.Context, store blob.Store, shard string, opts Options) (*Writer, error) {
	opts = opts.withDefaults()
	w := &writer{
		store:    store,
		shard:    shard,
		opts:     opts,
		id:       newWriterID(),
		inflight: map[string]inflightRef{},
		written:  newOwnBatches(maxOwnIDs),
		pinMax:   maxPinnedFilterBytes,
		claims:   newClaims(),
		halted:   make(chan struct{}),
	}
	w.committer = committer{w: w, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.merger = merger{w: w, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.collector = collector{w: w, done: make(chan struct{})}
	w.checkpointer = checkpointer{w: w, kick: make(chan struct{}, 1), retime: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{})}
	for lost := 0; ; lost++ {
		start := opts.Clock.Now()
		if err := w.claim(ctx); err != nil {
			return nil, err
		}
		err := w.openLog(ctx)
		if err == nil {
			break
		}
		if !errors.Is(err, errReclaim) {
			return nil, err
		}
		// A higher epoch claimed the shard meanwhile: claim after it, once
		// it has had time to finish opening. Claiming at once, concurrent
		// opens outbid each other for ever: each one's fence sends the
		// others back to claim, and each round is longer than the last,
		// as every probe reads the fences before it. So the pause grows
		// with the attempt's own length, not from a fixed cap.
		if err := reclaimPause(ctx, opts, opts.Clock.Now().Sub(start), lost); err != nil {
			return nil, fmt.Errorf("open shard %q: %w", shard, err)
		}
	}
	w.joinPresence()
	w.log = opts.Logger.With(zap.String("shard", shard), zap.Uint64("epoch", w.epoch))
	w.log.Info("shard writer opened", zap.String("writer", w.id), zap.Uint64("generation", w.m.GetNextGeneration()))
	// The writer's context is not derived from ctx: ctx bounds Open, while
	// the writer lives until Close or Abort.
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.background, w.stopBackground = context.WithCancel(w.ctx)
	go w.committer.runLog()
	go w.checkpointer.loop()
	if opts.DisableBackground {
		close(w.merger.done)
		close(w.collector.done)
	} else {
		go w.merger.loop()
		go w.collector.loop()
	}
	h := &Writer{w: w}
	runtime.AddCleanup(h, func(w *writer) { w.dropped() }, w)
	return h, nil
}

// reclaimPause waits before a writer that lost its open claims again: a
// jittered wait of about took, the lost attempt's length (at least
// RetryBackoff), doubled for each attempt lost before, up to 64 times.
func reclaimPause(ctx context.Context, opts Options, took time.Duration, lost int) error {
	d := max(took, opts.RetryBackoff) << min(lost, 6)
	select {
	case <-opts.Clock.After(d/2 + mrand.N(d/2+1)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newWriterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Shard returns the shard the writer owns.
func (h *Writer) Shard() string { return h.w.shard }

// Epoch returns the epoch the writer claimed.
func (h *Writer) Epoch() uint64 { return h.w.epoch }

// QueuedBytes reports the bytes queued or in flight, for metrics.
func (h *Writer) QueuedBytes() int64 {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.w.queued
}

// Err returns why the writer takes no more appends, or nil while it is
// open: ErrClosed when closing or closed, ErrAborted, the *FencedError, or
// the lasting error that stopped it (a create left undecided, which
// matches ErrOutcomeUnknown, or ErrStale). A holder can drop a dead writer
// without waiting for an append to fail.
func (h *Writer) Err() error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.w.stoppedLocked()
}

// Stats is a snapshot of a writer's bounded resources and work, for metrics.
type Stats struct {
	Epoch          uint64
	NextGeneration uint64
	QueuedBytes    int64
	Generations    int // live generations in the manifest
	Retired        int // retired generations awaiting deletion
	EpochRecords   int
	Records        uint64
	Merges         int64
	MergeDuration  time.Duration
	GCDeletedBlobs int64
	// Protocol v2: fences and checkpoints this writer wrote, the last
	// checkpointed log position and the last that landed.
	Fences        int64
	Checkpoints   int64
	LogCheckpoint uint64
	LogTail       uint64
}

// Stats returns the writer's current figures.
func (h *Writer) Stats() Stats {
	w := h.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{
		Epoch:          w.epoch,
		NextGeneration: w.m.GetNextGeneration(),
		QueuedBytes:    w.queued,
		Generations:    len(w.m.GetGenerations()),
		Retired:        retiredCount(w.m),
		EpochRecords:   len(w.m.GetEpochs()),
		Records:        w.m.GetRecordCount(),
		Merges:         w.merges.Load(),
		MergeDuration:  time.Duration(w.mergeNanos.Load()),
		GCDeletedBlobs: w.gcDeleted.Load(),
		Fences:         w.fences.Load(),
		Checkpoints:    w.ckpts.Load(),
		LogCheckpoint:  w.m.GetLogCheckpoint(),
		LogTail:        w.last,
	}
}

// Append commits entries as one unit of the shard's next commit and
// returns one Result per entry, in order. It returns only once the commit
// is durable: under protocol v2, after the create of the log position that
// holds it landed; under v1, after the generation is written and the
// manifest CAS that adds it has succeeded. The results are read-only:
// appends that shared their ids read them too.
//
// Appends are idempotent by record id: an id already committed is not stored
// again; its Result has AlreadyPresent and the stored Seq. An id committed
// with different client-set content fails the append with ErrIDConflict, and
// an id that another append is committing shares that commit's outcome.
//
// Errors, by what they tell the caller:
//   - certainly not committed, safe to retry: ErrFenced, ErrClosed,
//     ErrAborted, ErrStale, ErrBackpressure, ErrTooLarge, a storage error,
//     or ctx's error alone (the append was withdrawn before it was sent);
//   - may have landed: anything that matches ErrOutcomeUnknown, which
//     includes ctx's error once the commit was sent;
//   - ErrIDConflict: one of this append's own ids is stored (or in flight)
//     with other content; nothing of the append was committed.
//
// In every unclear case the caller learns the outcome by appending again
// with the same ids (and the same Entries): each id then comes back either
// newly committed or AlreadyPresent, never stored twice.
//
// By state: open appends; closing and closed fail with ErrClosed, aborted
// with ErrAborted, fenced with the *FencedError.
func (h *Writer) Append(ctx context.Context, entries []Entry) ([]Result, error) {
	// The handle must outlive its own call: a caller that holds it only
	// for this call would otherwise let its cleanup abort the writer
	// under the append.
	defer runtime.KeepAlive(h)
	return h.w.append(ctx, entries)
}

// Close flushes: it stops taking appends, commits everything queued (with
// any finished merge's waiting manifest edit), and waits for the committer
// to exit. If ctx ends first, Close aborts the writer (see Abort) and
// returns ctx's error.
//
// By state: open closes and returns nil, unless an Abort or a fence
// overtakes it (then ErrAborted or the *FencedError). A Close while
// another is closing waits for it, then returns ErrClosed, as does a Close
// of a closed writer. Aborted returns ErrAborted; fenced stops the
// writer's background work and returns the *FencedError.
func (h *Writer) Close(ctx context.Context) error {
	defer runtime.KeepAlive(h) // see Append
	return h.w.close(ctx)
}

// Abort discards un-acknowledged state, at once: it fails queued appends
// with ErrAborted and an in-flight commit's appends with ErrOutcomeUnknown,
// cancels the writer's I/O, and waits for its goroutines to exit. It starts
// no I/O, needs no context, and is safe to call from any goroutine, any
// number of times. Acknowledged appends are unaffected: they are already
// durable.
//
// By state: open and closing become aborted; closed, aborted and fenced
// stay as they are, and Abort only waits for the goroutines.
func (h *Writer) Abort() { h.w.abort() }

func (w *writer) close(ctx context.Context) error {
	w.mu.Lock()
	first := w.toLocked(stateClosing)
	w.mu.Unlock()
	if first {
		// A merge still running is abandoned: its output, if written, is
		// an orphan that GC removes under a later epoch. One whose
		// manifest edit already waits for a commit is committed below,
		// with the queue.
		w.stopBackground()
	}
	// In every state but open, the merger's context is cancelled by now:
	// by this or an earlier Close, a fence, or an abort.
	<-w.merger.done
	<-w.collector.done
	w.committer.wake()
	// The committer drains the queue, then the checkpointer writes the
	// last checkpoint, with the edits of merges and GC already done: it
	// exits last.
	w.checkpointer.close()
	last := w.checkpointer.done
	select {
	case <-last:
	case <-ctx.Done():
		select {
		case <-last: // drained just as ctx ended: nothing to discard
		default:
			w.abort()
			return fmt.Errorf("close shard %q epoch %d: %w; aborted, un-acknowledged appends were discarded", w.shard, w.epoch, ctx.Err())
		}
	}
	<-w.committer.done
	w.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.toLocked(stateClosed) {
		w.log.Info("shard writer closed", zap.Uint64("generation", w.m.GetNextGeneration()))
	}
	if first && w.state == stateClosed {
		return nil
	}
	// A second Close, or a Close that an Abort or a fence overtook.
	return w.stoppedLocked()
}

// abort is Abort: stop, then wait for the writer's goroutines.
func (w *writer) abort() {
	w.stop()
	<-w.committer.done
	<-w.merger.done
	<-w.collector.done
	<-w.checkpointer.done
}

// stop aborts the writer without waiting: it fails queued appends with
// ErrAborted and cancels the writer's I/O, after which its goroutines exit
// on their own. It reports whether this call aborted the writer.
func (w *writer) stop() bool {
	w.mu.Lock()
	aborted := w.toLocked(stateAborted)
	var queued []*pending
	if aborted {
		queued = w.takeQueueLocked()
	}
	w.mu.Unlock()
	w.cancel()
	if !aborted {
		return false
	}
	err := fmt.Errorf("shard %q epoch %d: %w before the append was sent", w.shard, w.epoch, ErrAborted)
	for _, p := range queued {
		w.settle(p, nil, err)
	}
	w.log.Info("shard writer aborted", zap.Int("discarded_appends", len(queued)))
	return true
}

// dropped runs as the cleanup of a handle that became unreachable. A
// cleanup must be short, so it only stops the writer: its goroutines exit
// on their own once its context is cancelled.
func (w *writer) dropped() {
	if w.stop() {
		w.log.Warn("shard writer was dropped without Close or Abort; aborted it")
	}
}
