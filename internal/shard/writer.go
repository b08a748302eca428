package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Writer is the resident writer of one shard. It is safe for concurrent use.
//
// Writer is a handle: the committer goroutine holds only the inner state, so
// a Writer that its owner drops without Close or Abort becomes unreachable,
// and a cleanup then aborts it (logging a warning) instead of leaking it.
type Writer struct {
	w *writer
}

// Result is the outcome of one appended record.
type Result struct {
	ID         string
	Seq        uint64
	Epoch      uint64
	Generation uint64
	// AlreadyPresent: the id was already committed; Seq is the stored one.
	AlreadyPresent bool
}

type state int

const (
	stateOpen state = iota
	stateClosing
	stateClosed
	stateAborted
	stateFenced
)

// pending is one Append waiting for its commit.
type pending struct {
	ctx     context.Context
	entries []Entry
	bytes   int64
	taken   bool // the committer took it; it can no longer be withdrawn
	done    chan struct{}
	results []Result
	err     error
}

func (p *pending) finish(results []Result, err error) {
	p.results, p.err = results, err
	close(p.done)
}

type writer struct {
	store blob.Store
	shard string
	opts  Options
	log   *zap.Logger
	id    string // random, identifies this writer instance in the manifest
	epoch uint64

	ctx    context.Context // cancelled by Abort; bounds all of the writer's I/O
	cancel context.CancelFunc
	kick   chan struct{} // wakes the committer; capacity 1
	done   chan struct{} // closed when the committer has exited

	mu       sync.Mutex
	state    state
	queue    []*pending
	queued   int64 // bytes queued or in flight
	fenceErr error // sticky once fenced

	// Owned by the committer goroutine (and by Open before it starts).
	m      *storagepb.Manifest
	etag   blob.ETag
	stale  bool   // m and etag must be re-read before the next commit
	puts   uint64 // numbers this writer's conditional puts
	minGen uint64 // lowest generation number not yet used by this writer
}

// Open claims the next epoch of shard and returns its resident writer. The
// shard must be valid (package validate). A lost claim is retried until this
// writer holds an epoch or ctx ends; fencing is only reported at commit time.
func Open(ctx context.Context, store blob.Store, shard string, opts Options) (*Writer, error) {
	opts = opts.withDefaults()
	w := &writer{
		store: store,
		shard: shard,
		opts:  opts,
		id:    newWriterID(),
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	if err := w.claim(ctx); err != nil {
		return nil, err
	}
	w.log = opts.Logger.With(zap.String("shard", shard), zap.Uint64("epoch", w.epoch))
	w.log.Info("shard writer opened", zap.String("writer", w.id), zap.Uint64("generation", w.m.GetNextGeneration()))
	// The writer's context is not derived from ctx: ctx bounds Open, while
	// the writer lives until Close or Abort.
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.run()
	h := &Writer{w: w}
	runtime.AddCleanup(h, func(w *writer) { w.dropped() }, w)
	return h, nil
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

// Append commits entries as one unit of the shard's next generation and
// returns one Result per entry, in order. It returns only after the
// generation is written and the manifest CAS that adds it has succeeded.
//
// Errors: ErrFenced, ErrClosed, ErrAborted (not sent), ErrOutcomeUnknown
// (may have landed), ErrBackpressure, ErrTooLarge, or a storage error. If
// ctx ends first, Append returns promptly with ctx's error; if the commit had
// already been sent, the error also matches ErrOutcomeUnknown, and the
// records may still land. In every unclear case the caller learns the outcome
// by retrying with the same ids.
func (h *Writer) Append(ctx context.Context, entries []Entry) ([]Result, error) {
	return h.w.append(ctx, entries)
}

// Close flushes: it stops taking appends, commits everything queued, and
// waits for the committer to exit. If ctx ends first, Close aborts the
// writer (see Abort) and returns ctx's error. A second Close returns
// ErrClosed; Close after Abort returns ErrAborted.
func (h *Writer) Close(ctx context.Context) error { return h.w.close(ctx) }

// Abort discards un-acknowledged state, at once: it fails queued appends
// with ErrAborted and an in-flight commit's appends with ErrOutcomeUnknown,
// cancels the writer's I/O, and waits for its goroutine to exit. It starts
// no I/O, needs no context, and is safe to call from any goroutine, any
// number of times. Acknowledged appends are unaffected: they are already
// durable.
func (h *Writer) Abort() { h.w.abort() }

func (w *writer) append(ctx context.Context, entries []Entry) ([]Result, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	var size int64
	for _, e := range entries {
		size += int64(len(e.Data)) + int64(len(e.ID))
	}
	if size > w.opts.MaxGenerationBytes {
		return nil, fmt.Errorf("%w: batch of %d bytes exceeds the %d-byte generation limit", ErrTooLarge, size, w.opts.MaxGenerationBytes)
	}
	p := &pending{ctx: ctx, entries: entries, bytes: size, done: make(chan struct{})}
	w.mu.Lock()
	if err := w.refuseLocked(); err != nil {
		w.mu.Unlock()
		return nil, err
	}
	if w.queued > 0 && w.queued+size > w.opts.MaxQueuedBytes {
		queued := w.queued
		w.mu.Unlock()
		return nil, fmt.Errorf("%w: shard %q has %d bytes queued (limit %d); retry later", ErrBackpressure, w.shard, queued, w.opts.MaxQueuedBytes)
	}
	w.queue = append(w.queue, p)
	w.queued += size
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}

	select {
	case <-p.done:
		return p.results, p.err
	case <-ctx.Done():
	}
	w.mu.Lock()
	select {
	case <-p.done:
		w.mu.Unlock()
		return p.results, p.err
	default:
	}
	if !p.taken {
		w.withdrawLocked(p)
		w.mu.Unlock()
		return nil, fmt.Errorf("append to shard %q not sent: %w", w.shard, ctx.Err())
	}
	w.mu.Unlock()
	return nil, fmt.Errorf("append to shard %q: %w; its commit was in flight and may still land, retry with the same ids (%w)", w.shard, ctx.Err(), ErrOutcomeUnknown)
}

// refuseLocked returns why the writer takes no appends, or nil.
func (w *writer) refuseLocked() error {
	switch w.state {
	case stateOpen:
		return nil
	case stateAborted:
		return fmt.Errorf("shard %q epoch %d: %w", w.shard, w.epoch, ErrAborted)
	case stateFenced:
		return w.fenceErr
	default:
		return fmt.Errorf("shard %q epoch %d: %w", w.shard, w.epoch, ErrClosed)
	}
}

func (w *writer) withdrawLocked(p *pending) {
	for i, q := range w.queue {
		if q == p {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			w.queued -= p.bytes
			return
		}
	}
}

func (w *writer) close(ctx context.Context) error {
	w.mu.Lock()
	switch w.state {
	case stateOpen:
		w.state = stateClosing
	case stateClosed:
		w.mu.Unlock()
		return fmt.Errorf("shard %q epoch %d: %w", w.shard, w.epoch, ErrClosed)
	case stateAborted:
		w.mu.Unlock()
		return fmt.Errorf("shard %q epoch %d: %w", w.shard, w.epoch, ErrAborted)
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		w.abort()
		return fmt.Errorf("close shard %q epoch %d: %w; aborted, un-acknowledged appends were discarded", w.shard, w.epoch, ctx.Err())
	}
	w.cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == stateFenced {
		w.log.Info("shard writer closed after fence")
		return w.fenceErr
	}
	w.state = stateClosed
	w.log.Info("shard writer closed", zap.Uint64("generation", w.m.GetNextGeneration()))
	return nil
}

func (w *writer) abort() {
	w.mu.Lock()
	queued := w.queue
	w.queue = nil
	wasOpen := w.state == stateOpen || w.state == stateClosing
	if wasOpen {
		w.state = stateAborted
	}
	for _, p := range queued {
		if !p.taken {
			w.queued -= p.bytes
		}
	}
	w.mu.Unlock()
	w.cancel()
	err := fmt.Errorf("shard %q epoch %d: %w before the append was sent; retry with the same ids", w.shard, w.epoch, ErrAborted)
	for _, p := range queued {
		if !p.taken {
			p.finish(nil, err)
		}
	}
	<-w.done
	if wasOpen {
		w.log.Info("shard writer aborted", zap.Int("discarded_appends", len(queued)))
	}
}

// dropped runs when the handle became unreachable.
func (w *writer) dropped() {
	w.mu.Lock()
	live := w.state == stateOpen || w.state == stateClosing
	w.mu.Unlock()
	if live {
		w.log.Warn("shard writer dropped without Close or Abort; aborting it")
		w.abort()
	}
}

// run is the committer: it commits everything queued, one generation at a
// time, until the writer is closed, aborted or fenced.
func (w *writer) run() {
	defer close(w.done)
	for {
		batch, ok := w.take()
		if !ok {
			return
		}
		w.commit(batch)
	}
}

// take waits for queued appends and takes as many as fit one generation.
func (w *writer) take() ([]*pending, bool) {
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
			return batch, true
		case w.state == stateClosing:
			w.mu.Unlock()
			return nil, false
		}
		w.mu.Unlock()
		select {
		case <-w.kick:
		case <-w.ctx.Done():
		}
	}
}

// commit commits one batch and settles every pending append in it.
func (w *writer) commit(batch []*pending) {
	// Appends whose callers gave up before the batch was taken are not sent.
	live := batch[:0]
	var dropped int64
	for _, p := range batch {
		if p.ctx.Err() != nil {
			p.finish(nil, fmt.Errorf("append to shard %q not sent: %w", w.shard, p.ctx.Err()))
			dropped += p.bytes
			continue
		}
		live = append(live, p)
	}
	var size int64
	for _, p := range live {
		size += p.bytes
	}
	if len(live) > 0 {
		ctx, cancel := context.WithTimeout(w.ctx, w.opts.CommitTimeout)
		results, err := w.commitBatch(ctx, live)
		cancel()
		var fenced *FencedError
		if errors.As(err, &fenced) {
			w.fence(fenced)
		}
		off := 0
		for _, p := range live {
			if err != nil {
				p.finish(nil, err)
				continue
			}
			p.finish(results[off:off+len(p.entries)], nil)
			off += len(p.entries)
		}
	}
	w.mu.Lock()
	w.queued -= size + dropped
	w.mu.Unlock()
}

// fence marks the writer dead: every queued and future append fails with
// the fence error.
func (w *writer) fence(err *FencedError) {
	w.mu.Lock()
	if w.state == stateAborted {
		w.mu.Unlock()
		return
	}
	w.state = stateFenced
	w.fenceErr = err
	queued := w.queue
	w.queue = nil
	for _, p := range queued {
		w.queued -= p.bytes
	}
	w.mu.Unlock()
	for _, p := range queued {
		p.finish(nil, err)
	}
	w.log.Warn("shard writer fenced", zap.Uint64("stored_epoch", err.Stored))
}
