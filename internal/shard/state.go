package shard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// writer is the state behind a Writer. Four goroutines work on it, each
// with a state of its own: the committer (committer.go), which creates log
// positions; the checkpointer (checkpoint.go), which alone writes the
// manifest after the claim; the merger (merger.go); and the collector
// (gc.go). Callers of Append queue work for the committer (append.go).
// What more than one of them touches is under mu, or in claims, which has
// its own lock. Lock
// order: claims.mu, then mu (claims.claimLive reads the manifest); nothing
// takes claims.mu while holding mu.
type writer struct {
	// Set by Open, then only read.
	store blob.Store
	shard string
	opts  Options
	log   *zap.Logger
	id    string // random, identifies this writer instance in the manifest
	epoch uint64
	puts  atomic.Uint64 // numbers this writer's conditional puts

	// Counters for Stats.
	merges     atomic.Int64 // merges committed
	mergeNanos atomic.Int64 // time spent in committed merges
	gcDeleted  atomic.Int64 // blobs deleted by GC

	ctx    context.Context // cancelled by Abort; bounds all of the writer's I/O
	cancel context.CancelFunc
	// background bounds the merger's and the collector's work: Close, a
	// fence and Abort cancel it, and they stop first.
	background     context.Context
	stopBackground context.CancelFunc

	committer    committer
	merger       merger
	collector    collector
	checkpointer checkpointer
	claims       *claims // the generations the merger rewrites
	// replaced is the manifest this writer's claim replaced (nil when it
	// created the shard): whose writer it was decides whether the claim
	// must fence the log (Lineage).
	replaced *storagepb.Manifest
	// claimed: the claim was confirmed (its fence, or the proof that none
	// was needed, and the confirming CAS). Only a confirmed writer that
	// ended with every create answered lets the process's next writer of
	// the shard skip the fence: a claim that landed and then was abandoned
	// before it fenced leaves stale writers free to land creates.
	claimed bool
	fences  atomic.Int64 // fences written (protocol v2)
	ckpts   atomic.Int64 // checkpoints written (protocol v2)

	// mu guards the fields below it.
	mu       sync.Mutex
	state    state                  // changed only by toLocked
	fenceErr error                  // sticky once fenced: why the writer stopped
	queue    []*pending             // appends waiting for the committer
	queued   int64                  // bytes queued or in flight
	inflight map[string]inflightRef // the ids of appends queued or being committed
	written  ownBatches             // its own live batches, by id (presence.go)
	edits    []*edit                // manifest edits waiting for the next commit
	editsAt  time.Time              // when the oldest of edits was queued
	minGen   uint64                 // lowest generation number not yet used by this writer
	// filtered lists the generations of m that written does not answer
	// for, in m's order: the ones findPresent tests through their filters
	// (filtered.go). It only grows in place (addTailLocked) or is
	// replaced, so that findPresent may read a snapshot of it without mu.
	// pinned is the bytes of the filters its entries hold, at most
	// pinMax.
	filtered []*filteredGen
	pinned   int64
	pinMax   int64
	// refuseErr is what a fenced writer answers an append that was never
	// sent: the fence itself, or, when the writer stopped for another
	// reason (a create left undecided), a not-sent error, since only the
	// appends of that create may have landed.
	refuseErr error
	// halted is closed when the writer stops in the fenced state, so that
	// a commit waiting for a checkpoint stops waiting (awaitCheckpointRoom).
	halted chan struct{}
	// m is the last manifest this writer committed or read. The committer
	// replaces it and never mutates it, so others may read a snapshot of
	// the pointer.
	m    *storagepb.Manifest
	etag blob.ETag

	// Protocol v2. m is then the writer's view: ckpt, the last checkpoint
	// known durable (etag is its ETag), with the log batches of tail, the
	// positions after it that landed, appended (viewOf). last is the last
	// position that landed. ckptLanded is closed, and replaced, whenever a
	// checkpoint lands.
	ckpt       *storagepb.Manifest
	tail       []*shardlog.Entry
	last       uint64
	ckptLanded chan struct{}
	// viewGens holds the generations of viewOf, the view addTailLocked
	// last made, with room for the next commits' (shardlog.Extend).
	viewGens []*storagepb.Generation
	viewOf   *storagepb.Manifest
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
	w.leavePresenceLocked() // no state but open takes appends (filtered.go)
	return true
}

// refuseLocked returns why the writer takes no appends, or nil.
func (w *writer) refuseLocked() error {
	switch w.state {
	case stateOpen:
		return nil
	case stateAborted:
		return fmt.Errorf("shard %q epoch %d: %w", w.shard, w.epoch, ErrAborted)
	case stateFenced:
		return w.refuseErr
	default:
		return fmt.Errorf("shard %q epoch %d: %w", w.shard, w.epoch, ErrClosed)
	}
}

// stoppedLocked is refuseLocked, but for a fenced writer the error that
// stopped it rather than the answer to an append that was not sent.
func (w *writer) stoppedLocked() error {
	if w.state == stateFenced {
		return w.fenceErr
	}
	return w.refuseLocked()
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

// allocGen returns a generation number no commit or merge of this writer
// has used.
func (w *writer) allocGen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := max(w.m.GetNextGeneration(), w.minGen)
	w.minGen = gen + 1
	return gen
}

// manifest returns the last published manifest; it must not be modified.
func (w *writer) manifest() *storagepb.Manifest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m
}

// fence marks the writer dead: every queued and future append fails with
// the fence error.
func (w *writer) fence(err *FencedError) {
	if w.halt(err, err) {
		w.log.Warn("shard writer fenced", zap.Uint64("stored_epoch", err.Stored))
	}
}

// halt stops the writer for good, in the fenced state: err says why, and
// every queued and future append fails with queuedErr, since none of them
// was sent. It reports whether this call stopped it.
func (w *writer) halt(err, queuedErr error) bool {
	w.mu.Lock()
	if !w.toLocked(stateFenced) {
		w.mu.Unlock()
		return false
	}
	w.fenceErr, w.refuseErr = err, queuedErr
	close(w.halted)
	queued := w.takeQueueLocked()
	w.mu.Unlock()
	for _, p := range queued {
		w.settle(p, nil, queuedErr)
	}
	w.stopBackground()
	w.committer.wake()
	w.checkpointer.wake()
	return true
}

// source is the writer's shard as stored, read through the shared cache.
func (w *writer) source() shardlog.Source {
	return shardlog.NewSource(w.store, w.opts.Cache, w.shard)
}
