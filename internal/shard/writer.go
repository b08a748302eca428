package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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

// state is where a writer is in its life. Every change of state goes
// through toLocked, which allows only these transitions:
//
//	open    ──Close──────────────────────────▶ closing
//	open    ──Abort, or the handle dropped───▶ aborted
//	open    ──a higher epoch found───────────▶ fenced
//	closing ──the committer drained──────────▶ closed
//	closing ──Abort, or Close's ctx ended────▶ aborted
//	closing ──a higher epoch found───────────▶ fenced
//
// closed, aborted and fenced are final. What each verb answers in each
// state is in the doc of Append, Close, Abort and Err, and in
// TestStateMachineAnswers.
type state int

const (
	stateOpen state = iota
	stateClosing
	stateClosed
	stateAborted
	stateFenced
)

func (s state) String() string {
	switch s {
	case stateOpen:
		return "open"
	case stateClosing:
		return "closing"
	case stateClosed:
		return "closed"
	case stateAborted:
		return "aborted"
	case stateFenced:
		return "fenced"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// transitions lists, for each state, the states it may move to.
var transitions = map[state][]state{
	stateOpen:    {stateClosing, stateAborted, stateFenced},
	stateClosing: {stateClosed, stateAborted, stateFenced},
}

// toLocked moves the writer to next if that is a transition of the state
// machine, and reports whether it did. The caller holds mu.
func (w *writer) toLocked(next state) bool {
	if !slices.Contains(transitions[w.state], next) {
		return false
	}
	w.state = next
	return true
}

// pending is one Append's new entries waiting for their commit.
//
// Exactly one party settles a pending, by construction: the one that takes
// it out of writer.queue under mu. That is the committer (take), a fence or
// an abort (takeQueueLocked), or its own caller withdrawing it (await). A
// caller that finds its pending already gone from the queue waits for done.
type pending struct {
	ctx     context.Context
	entries []Entry
	bytes   int64
	taken   bool // the committer took it; it can no longer be withdrawn
	done    chan struct{}
	results []Result
	err     error

	// checked is the manifest whose generations the entries' ids were
	// looked up in (none was there), and adopted the writer's count of
	// adopted manifests then; see writer.recheck.
	checked *storagepb.Manifest
	adopted uint64
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
	puts  atomic.Uint64 // numbers this writer's conditional puts

	merges     atomic.Int64 // merges committed, folds included
	folds      atomic.Int64 // merges done by a commit (fold.go)
	mergeNanos atomic.Int64 // time spent in committed merges
	gcDeleted  atomic.Int64 // blobs deleted by GC

	ctx    context.Context // cancelled by Abort; bounds all of the writer's I/O
	cancel context.CancelFunc
	kick   chan struct{} // wakes the committer; capacity 1
	done   chan struct{} // closed when the committer has exited

	// The merger runs beside the committer and stops first on Close.
	mergeCtx    context.Context
	mergeCancel context.CancelFunc
	mergeKick   chan struct{}
	mergeDone   chan struct{}
	gcDone      chan struct{}

	claims *claims // between the merger and the committer

	mu       sync.Mutex
	state    state
	queue    []*pending
	queued   int64 // bytes queued or in flight
	fenceErr error // sticky once fenced
	inflight map[string]inflightRef
	edits    []*edit   // manifest edits waiting for the next commit
	editsAt  time.Time // when the oldest of edits was queued
	minGen   uint64    // lowest generation number not yet used by this writer
	// m is the last manifest this writer committed or read. The committer
	// replaces it (under mu) and never mutates it, so others may read a
	// snapshot of the pointer.
	m    *storagepb.Manifest
	etag blob.ETag
	// adopted counts the manifests the committer read back and made m
	// (adopt), as opposed to the ones it wrote itself.
	adopted uint64
	folding []uint64 // committer-only: the commit's claim (fold.go)

	stale bool // committer-only: m and etag must be re-read before the next commit
}

// inflightRef points at an entry queued or being committed.
type inflightRef struct {
	p    *pending
	i    int
	hash uint64
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

		mergeKick: make(chan struct{}, 1),
		mergeDone: make(chan struct{}),
		gcDone:    make(chan struct{}),
		inflight:  map[string]inflightRef{},
		claims:    newClaims(),
	}
	if err := w.claim(ctx); err != nil {
		return nil, err
	}
	w.log = opts.Logger.With(zap.String("shard", shard), zap.Uint64("epoch", w.epoch))
	w.log.Info("shard writer opened", zap.String("writer", w.id), zap.Uint64("generation", w.m.GetNextGeneration()))
	// The writer's context is not derived from ctx: ctx bounds Open, while
	// the writer lives until Close or Abort.
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.mergeCtx, w.mergeCancel = context.WithCancel(w.ctx)
	go w.run()
	go w.mergeLoop()
	go w.gcLoop()
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

// Err returns why the writer takes no more appends, or nil while it is
// open: ErrClosed when closing or closed, ErrAborted, or the *FencedError.
// A holder can drop a dead writer without waiting for an append to fail.
func (h *Writer) Err() error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	return h.w.refuseLocked()
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
	Merges         int64 // folds included
	Folds          int64 // merges done by a commit (see fold.go)
	MergeDuration  time.Duration
	GCDeletedBlobs int64
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
		Folds:          w.folds.Load(),
		MergeDuration:  time.Duration(w.mergeNanos.Load()),
		GCDeletedBlobs: w.gcDeleted.Load(),
	}
}

// Append commits entries as one unit of the shard's next generation and
// returns one Result per entry, in order. It returns only after the
// generation is written and the manifest CAS that adds it has succeeded.
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
func (h *Writer) Close(ctx context.Context) error { return h.w.close(ctx) }

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

func (w *writer) append(ctx context.Context, entries []Entry) ([]Result, error) {
	partly := false // some of entries were committed by an earlier try
	for {
		results, committed, err := w.appendOnce(ctx, entries)
		partly = partly || committed
		if errors.Is(err, errWithdrawn) {
			// An append this one shared an id with failed for a reason of
			// its own; try again on our own.
			continue
		}
		if err != nil && partly && !errors.Is(err, ErrOutcomeUnknown) {
			// Its own records are stored; only a retry with the same ids
			// can tell the caller about the rest.
			err = fmt.Errorf("shard %q: some of the append's records were committed and others were not (%w): %w", w.shard, ErrOutcomeUnknown, err)
		}
		return results, err
	}
}

// errWithdrawn settles a pending append whose caller gave up before it was
// sent. Appends that shared its ids retry; its own caller sees ctx's error.
var errWithdrawn = errors.New("append withdrawn")

// shared is an entry of this append that another, unsettled append is
// already committing.
type shared struct {
	ref inflightRef
	i   int // index in this append
}

// appendOnce tries entries once. committed reports whether the entries
// this append committed itself (not those it shared) were committed,
// whatever the error.
func (w *writer) appendOnce(ctx context.Context, entries []Entry) (_ []Result, committed bool, _ error) {
	if len(entries) == 0 {
		return nil, false, nil
	}
	var size int64
	for _, e := range entries {
		size += int64(len(e.Data)) + int64(len(e.ID))
	}
	if size > w.opts.MaxGenerationBytes {
		return nil, committed, fmt.Errorf("%w: batch of %d bytes exceeds the %d-byte generation limit", ErrTooLarge, size, w.opts.MaxGenerationBytes)
	}
	results := make([]Result, len(entries))
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}

	// Find ids that are already committed. The loop ends holding mu with
	// every generation of the current manifest checked, so an id committed
	// after that is still in inflight below.
	present := map[string]found{}
	var checked map[uint64]bool
	vanished := 0
	for {
		w.mu.Lock()
		if err := w.refuseLocked(); err != nil {
			w.mu.Unlock()
			return nil, committed, err
		}
		m := w.m
		var todo []*storagepb.Generation
		for _, g := range m.GetGenerations() {
			if !checked[g.GetNumber()] {
				todo = append(todo, g)
			}
		}
		if len(todo) == 0 {
			break
		}
		w.mu.Unlock()
		err := lookupCommitted(ctx, w.store, w.opts.Cache, w.shard, todo, ids, present)
		if errors.Is(err, blob.ErrNotFound) && vanished < maxReadRetries {
			// A merge retired a generation and GC deleted it meanwhile;
			// its records are in the merged one. Look again.
			vanished++
			checked = nil
			continue
		}
		if errors.Is(err, blob.ErrNotFound) {
			// Our own manifest keeps listing a generation that storage
			// no longer has: another writer took the shard over, merged
			// and collected. Storage says so.
			if m, _, rerr := readManifest(ctx, w.store, w.shard); rerr == nil && m.GetEpoch() != w.epoch {
				fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
				w.fence(fe)
				return nil, committed, fe
			}
			return nil, committed, w.staleErr(err)
		}
		if err != nil {
			return nil, committed, err
		}
		if checked == nil {
			checked = map[uint64]bool{}
		}
		for _, g := range todo {
			checked[g.GetNumber()] = true
		}
	}
	// mu is held.
	var fresh []Entry
	var freshIdx []int
	var waits []shared
	for i, e := range entries {
		if f, ok := present[e.ID]; ok {
			if f.entry.GetClientHash() != e.ClientHash {
				w.mu.Unlock()
				return nil, committed, &IDConflictError{Shard: w.shard, ID: e.ID, Seq: f.entry.GetSeq()}
			}
			results[i] = Result{ID: e.ID, Seq: f.entry.GetSeq(), Epoch: f.gen.GetEpoch(), Generation: f.gen.GetNumber(), AlreadyPresent: true}
			continue
		}
		if ref, ok := w.inflight[e.ID]; ok {
			if ref.hash != e.ClientHash {
				w.mu.Unlock()
				return nil, committed, &IDConflictError{Shard: w.shard, ID: e.ID, InFlight: true}
			}
			waits = append(waits, shared{ref: ref, i: i})
			continue
		}
		fresh = append(fresh, e)
		freshIdx = append(freshIdx, i)
	}
	var p *pending
	if len(fresh) > 0 {
		var freshSize int64
		for _, e := range fresh {
			freshSize += int64(len(e.Data)) + int64(len(e.ID))
		}
		if w.queued > 0 && w.queued+freshSize > w.opts.MaxQueuedBytes {
			queued := w.queued
			w.mu.Unlock()
			return nil, committed, fmt.Errorf("%w: shard %q has %d bytes queued (limit %d); retry later", ErrBackpressure, w.shard, queued, w.opts.MaxQueuedBytes)
		}
		p = &pending{ctx: ctx, entries: fresh, bytes: freshSize, done: make(chan struct{}), checked: w.m, adopted: w.adopted}
		for i, e := range fresh {
			w.inflight[e.ID] = inflightRef{p: p, i: i, hash: e.ClientHash}
		}
		w.queue = append(w.queue, p)
		w.queued += freshSize
	}
	w.mu.Unlock()
	if p != nil {
		select {
		case w.kick <- struct{}{}:
		default:
		}
		rs, err := w.await(ctx, p)
		if err != nil {
			return nil, false, err
		}
		committed = true
		for k, i := range freshIdx {
			results[i] = rs[k]
		}
	}
	for _, s := range waits {
		select {
		case <-s.ref.p.done:
		case <-ctx.Done():
			return nil, committed, fmt.Errorf("append to shard %q: %w while waiting for an in-flight append of id %q (%w)", w.shard, ctx.Err(), entries[s.i].ID, ErrOutcomeUnknown)
		}
		if err := s.ref.p.err; err != nil {
			if !sharesFate(err, entries[s.i].ID) {
				// The other append failed for a reason of its own (an id
				// of its own conflicts, or it was withdrawn): this id
				// was simply not committed. Try again on our own.
				return nil, committed, errWithdrawn
			}
			return nil, committed, err
		}
		r := s.ref.p.results[s.ref.i]
		r.AlreadyPresent = true
		results[s.i] = r
	}
	return results, committed, nil
}

// sharesFate reports whether err, the failure of another append that was
// committing id for this one, is also this append's answer for id. A
// conflict on another of that append's ids is not: it says nothing about
// id, which was merely left uncommitted.
func sharesFate(err error, id string) bool {
	if errors.Is(err, errWithdrawn) {
		return false
	}
	var conflict *IDConflictError
	return !errors.As(err, &conflict) || conflict.ID == id
}

// staleErr reports that a generation this writer's manifest lists is gone
// from storage: lookup is the storage error that found it missing.
func (w *writer) staleErr(lookup error) error {
	return fmt.Errorf("shard %q epoch %d: %w: %v", w.shard, w.epoch, ErrStale, lookup)
}

// await waits for p's commit, or for ctx.
func (w *writer) await(ctx context.Context, p *pending) ([]Result, error) {
	select {
	case <-p.done:
		return w.own(ctx, p)
	case <-ctx.Done():
	}
	w.mu.Lock()
	withdrawn := w.withdrawLocked(p)
	taken := p.taken
	w.mu.Unlock()
	if withdrawn {
		w.settle(p, nil, errWithdrawn)
		return nil, fmt.Errorf("append to shard %q not sent: %w", w.shard, ctx.Err())
	}
	if !taken {
		// A fence or an abort took p out of the queue; it settles p at
		// once, with no I/O in between.
		<-p.done
		return w.own(ctx, p)
	}
	select {
	case <-p.done:
		return w.own(ctx, p)
	default:
	}
	return nil, fmt.Errorf("append to shard %q: %w; its commit was in flight and may still land (%w)", w.shard, ctx.Err(), ErrOutcomeUnknown)
}

// own turns a settled pending into its caller's answer.
func (w *writer) own(ctx context.Context, p *pending) ([]Result, error) {
	if errors.Is(p.err, errWithdrawn) {
		return nil, fmt.Errorf("append to shard %q not sent: %w", w.shard, context.Cause(ctx))
	}
	return p.results, p.err
}

// settle finishes p and forgets its ids.
func (w *writer) settle(p *pending, results []Result, err error) {
	w.mu.Lock()
	for _, e := range p.entries {
		if ref, ok := w.inflight[e.ID]; ok && ref.p == p {
			delete(w.inflight, e.ID)
		}
	}
	w.mu.Unlock()
	p.finish(results, err)
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

// withdrawLocked takes p out of the queue, if it is still there, and
// reports whether it was: only then does the caller own p and settle it.
func (w *writer) withdrawLocked(p *pending) bool {
	i := slices.Index(w.queue, p)
	if i < 0 {
		return false
	}
	w.queue = slices.Delete(w.queue, i, i+1)
	w.queued -= p.bytes
	return true
}

// takeQueueLocked takes every queued append out of the queue. The caller
// owns them and must settle each.
func (w *writer) takeQueueLocked() []*pending {
	queued := w.queue
	w.queue = nil
	for _, p := range queued {
		w.queued -= p.bytes
	}
	return queued
}

func (w *writer) close(ctx context.Context) error {
	w.mu.Lock()
	first := w.toLocked(stateClosing)
	w.mu.Unlock()
	if first {
		// A merge still running is abandoned: its output, if written, is
		// an orphan that GC removes under a later epoch. One whose
		// manifest edit already waits for a commit is committed below,
		// with the queue.
		w.mergeCancel()
	}
	// In every state but open, the merger's context is cancelled by now:
	// by this or an earlier Close, a fence, or an abort.
	<-w.mergeDone
	<-w.gcDone
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
	if w.toLocked(stateClosed) {
		w.log.Info("shard writer closed", zap.Uint64("generation", w.m.GetNextGeneration()))
	}
	if first && w.state == stateClosed {
		return nil
	}
	// A second Close, or a Close that an Abort or a fence overtook.
	return w.refuseLocked()
}

// abort is Abort: stop, then wait for the writer's goroutines.
func (w *writer) abort() {
	w.stop()
	<-w.done
	<-w.mergeDone
	<-w.gcDone
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

// fence marks the writer dead: every queued and future append fails with
// the fence error.
func (w *writer) fence(err *FencedError) {
	w.mu.Lock()
	if !w.toLocked(stateFenced) {
		w.mu.Unlock()
		return
	}
	w.fenceErr = err
	queued := w.takeQueueLocked()
	w.mu.Unlock()
	for _, p := range queued {
		w.settle(p, nil, err)
	}
	w.mergeCancel()
	w.log.Warn("shard writer fenced", zap.Uint64("stored_epoch", err.Stored))
}

// allocGen returns a generation number no commit or merge of this writer
// has used.
func (w *writer) allocGen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := max(w.m.GetNextGeneration(), w.minGen)
	w.minGen = gen + 1
	return gen
}

// setManifest publishes a manifest the committer committed.
func (w *writer) setManifest(m *storagepb.Manifest, etag blob.ETag) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m, w.etag = m, etag
}

// adopt publishes a manifest the committer read back after an unclear
// commit. It may list generations that no append queued before it looked
// its ids up in: a commit reported as of unknown outcome may have landed
// after all, and its caller may be retrying the same ids. The committer
// looks those up before it commits them (recheck).
func (w *writer) adopt(m *storagepb.Manifest, etag blob.ETag) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.m, w.etag = m, etag
	w.adopted++
}

// manifest returns the last published manifest; it must not be modified.
func (w *writer) manifest() *storagepb.Manifest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m
}
