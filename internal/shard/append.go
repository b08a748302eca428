package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// Result is the outcome of one appended record.
type Result struct {
	ID    string
	Seq   uint64
	Epoch uint64
	// Generation is the number of the generation that holds the record,
	// or, under protocol v2, the log position its commit created.
	Generation uint64
	// AlreadyPresent: the id was already committed; Seq is the stored one.
	AlreadyPresent bool
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

	// wait is the queue-wait span, nil unless traced (trace.go).
	wait trace.Span
}

func (p *pending) finish(results []Result, err error) {
	if p.wait != nil {
		// Ends the span of an append that was never taken (withdrawn,
		// fenced, aborted); End is idempotent for one the committer took.
		p.wait.End()
	}
	p.results, p.err = results, err
	close(p.done)
}

// inflightRef points at an entry queued or being committed.
type inflightRef struct {
	p    *pending
	i    int
	hash uint64
}

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

// appendOnce tries entries once. committed reports whether any of
// entries was committed, by this append or by one it shared ids with,
// whatever the error.
//
// It goes in four steps: find which ids are already committed
// (findPresent), sort the rest into new ones and ones another append is
// committing (partitionLocked), queue the new ones for the committer
// (enqueueLocked) and wait for their commit (await), then wait for the
// appends it shares ids with (awaitShared).
func (w *writer) appendOnce(ctx context.Context, entries []Entry) (_ []Result, committed bool, _ error) {
	if len(entries) == 0 {
		return nil, false, nil
	}
	var size int64
	for _, e := range entries {
		size += e.size()
	}
	if size > w.opts.MaxGenerationBytes {
		return nil, false, fmt.Errorf("%w: batch of %d bytes exceeds the %d-byte generation limit", ErrTooLarge, size, w.opts.MaxGenerationBytes)
	}
	present := map[string]shardlog.Found{}
	if err := w.findPresent(ctx, entries, present); err != nil {
		return nil, false, err
	}
	// mu is held.
	part, err := w.partitionLocked(entries, present)
	var p *pending
	if err == nil && len(part.fresh) > 0 {
		p, err = w.enqueueLocked(ctx, part.fresh)
	}
	w.mu.Unlock()
	if err != nil {
		return nil, false, w.sharedMayLand(part.waits, err)
	}
	if p == nil && len(part.waits) == 0 {
		// Every id was found committed, from memory or the cache, and
		// nothing will be written: no commit will find this writer fenced
		// if the shard was deleted meanwhile by another instance, whose
		// tombstone holds none of these records. Say they are stored only
		// while this writer still holds the shard.
		if err := w.confirmHeld(ctx); err != nil {
			return nil, false, err
		}
	}
	if p != nil {
		w.committer.wake()
		rs, err := w.await(ctx, p)
		if err != nil {
			return nil, false, w.sharedMayLand(part.waits, err)
		}
		committed = true
		if part.results == nil {
			// Every entry was fresh: the commit's results are the
			// append's, in order.
			return rs, committed, nil
		}
		placeFresh(part.results, rs, part.waits)
	}
	landed, err := w.awaitShared(ctx, entries, part.waits, part.results)
	if err != nil {
		return nil, committed || landed, err
	}
	return part.results, committed, nil
}

// sharedMayLand returns err, the failure of an append's own part, as
// ErrOutcomeUnknown when an append it shares ids with was committed or may
// still be: the caller must not hear that none of its records is stored.
func (w *writer) sharedMayLand(waits []shared, err error) error {
	for _, s := range waits {
		select {
		case <-s.ref.p.done:
			if perr := s.ref.p.err; perr != nil && !errors.Is(perr, ErrOutcomeUnknown) {
				continue
			}
		default:
		}
		return fmt.Errorf("shard %q: records of this append that another append was committing may be stored (%w): %w", w.shard, ErrOutcomeUnknown, err)
	}
	return err
}

// findPresent looks the ids of entries up in the generations of the
// writer's manifest and adds those it finds committed to present. On
// success it returns holding mu, with every generation of the current
// manifest checked, so that an id committed after that is still in
// inflight. The batches this writer committed itself are answered from
// memory, under mu (w.written); the others through their filters, without mu.
// (present is the caller's, so that it can stay on the stack.)
func (w *writer) findPresent(ctx context.Context, entries []Entry, present map[string]shardlog.Found) error {
	var ids []string
	var done []*filteredGen // looked up already
	vanished := 0
	for {
		w.mu.Lock()
		if err := w.refuseLocked(); err != nil {
			w.mu.Unlock()
			return err
		}
		todo := notDone(w.filtered, done)
		if len(todo) == 0 {
			w.written.lookup(entries, present)
			return nil
		}
		w.mu.Unlock()
		if ids == nil {
			ids = make([]string, len(entries))
			for i, e := range entries {
				ids[i] = e.ID
			}
		}
		err := w.lookupFiltered(ctx, todo, ids, present)
		if errors.Is(err, blob.ErrNotFound) && vanished < shardlog.MaxReadRetries {
			// A merge retired a generation and GC deleted it meanwhile;
			// its records are in the merged one. Look again.
			vanished++
			done = nil
			continue
		}
		if errors.Is(err, blob.ErrNotFound) {
			return w.missingGeneration(ctx, err)
		}
		if err != nil {
			return err
		}
		done = appendDone(done, todo)
	}
}

// missingGeneration explains lookup, the storage error of a generation that our own
// manifest keeps listing and storage no longer has: another writer took
// the shard over, merged and collected. Storage says so.
func (w *writer) missingGeneration(ctx context.Context, lookup error) error {
	m, _, rerr := shardlog.ReadManifest(ctx, w.store, w.shard)
	switch {
	case rerr != nil:
		// Nothing proves this writer stale: replacing it would fence its
		// commits in flight over what may be a passing read failure.
		return fmt.Errorf("shard %q: a generation is missing (%v) and the manifest could not be re-read: %w", w.shard, lookup, rerr)
	case m.GetEpoch() != w.epoch:
		fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
		w.fence(fe)
		return fe
	}
	return w.staleErr(lookup)
}

// confirmHeld reads the manifest and fences the writer when another
// claimed the shard since (a delete does, with a tombstone): an append
// that commits nothing learns so only here. A read that fails proves
// nothing, and is the append's error: the caller may retry it.
func (w *writer) confirmHeld(ctx context.Context) error {
	m, _, err := shardlog.ReadManifest(ctx, w.store, w.shard)
	switch {
	case err != nil:
		return fmt.Errorf("shard %q: confirm that this writer still holds the shard: %w", w.shard, err)
	case m.GetEpoch() != w.epoch:
		fe := &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
		w.fence(fe)
		return fe
	}
	return nil
}

// partition sorts an append's entries by what becomes of them.
type partition struct {
	fresh []Entry  // new: to be committed by this append, in order
	waits []shared // being committed by another append, in order
	// results has the append's results in place of its entries' once
	// one of them is found present or shared, and is nil while every
	// entry is fresh: the commit's results are then the append's.
	results []Result
}

// shared is an entry of this append that another, unsettled append is
// already committing.
type shared struct {
	ref inflightRef
	i   int // index in this append
}

// partitionLocked sorts entries: an id found committed gets its result
// now, an id in flight is shared with the append committing it, and the
// rest are fresh. An id stored or in flight with other content fails the
// append with an *IDConflictError (the first such), after every entry was
// sorted, so that the caller still knows which of its ids other appends
// are committing. The caller holds mu.
func (w *writer) partitionLocked(entries []Entry, present map[string]shardlog.Found) (partition, error) {
	var part partition
	var conflict error
	for i, e := range entries {
		if f, ok := present[e.ID]; ok {
			if f.Entry.GetClientHash() != e.ClientHash && conflict == nil {
				conflict = &IDConflictError{Shard: w.shard, ID: e.ID, Seq: f.Entry.GetSeq()}
			}
			part.resultsFor(entries)[i] = Result{ID: e.ID, Seq: f.Entry.GetSeq(), Epoch: f.Gen.GetEpoch(), Generation: genNumber(f.Gen), AlreadyPresent: true}
			continue
		}
		if ref, ok := w.inflight[e.ID]; ok {
			if ref.hash != e.ClientHash {
				if conflict == nil {
					conflict = &IDConflictError{Shard: w.shard, ID: e.ID, InFlight: true}
				}
				continue
			}
			part.resultsFor(entries)
			part.waits = append(part.waits, shared{ref: ref, i: i})
			continue
		}
		part.fresh = append(part.fresh, e)
	}
	return part, conflict
}

// resultsFor returns part.results, made for entries on first use.
func (part *partition) resultsFor(entries []Entry) []Result {
	if part.results == nil {
		part.results = make([]Result, len(entries))
	}
	return part.results
}

// placeFresh puts rs, the results of an append's fresh entries, in their
// places in results: the fresh entries are, in order, those that
// partitionLocked neither found present (AlreadyPresent) nor shared.
func placeFresh(results, rs []Result, waits []shared) {
	k, next := 0, 0
	for i := range results {
		switch {
		case next < len(waits) && waits[next].i == i:
			next++
		case !results[i].AlreadyPresent:
			results[i] = rs[k]
			k++
		}
	}
}

// enqueueLocked queues fresh for the committer as one pending append, or
// fails with ErrBackpressure when the queue is full. The caller holds mu.
func (w *writer) enqueueLocked(ctx context.Context, fresh []Entry) (*pending, error) {
	var size int64
	for _, e := range fresh {
		size += e.size()
	}
	if w.queued > 0 && w.queued+size > w.opts.MaxQueuedBytes {
		return nil, fmt.Errorf("%w: shard %q has %d bytes queued (limit %d); retry later", ErrBackpressure, w.shard, w.queued, w.opts.MaxQueuedBytes)
	}
	p := &pending{ctx: ctx, entries: fresh, bytes: size, done: make(chan struct{})}
	for i, e := range fresh {
		w.inflight[e.ID] = inflightRef{p: p, i: i, hash: e.ClientHash}
	}
	w.startQueueWait(ctx, p)
	w.queue = append(w.queue, p)
	w.queued += size
	return p, nil
}

// awaitShared waits for the appends committing the ids this append shares
// with them, and takes their results as its own, AlreadyPresent. It waits
// for every one of them, whatever each answers, so that its answer covers
// every shared id: landed reports whether any of them was, or may yet be,
// committed. Its error is the first that is this append's answer too
// (see sharesFate), else errWithdrawn when some shared id was merely left
// uncommitted.
func (w *writer) awaitShared(ctx context.Context, entries []Entry, waits []shared, results []Result) (landed bool, err error) {
	for _, s := range waits {
		select {
		case <-s.ref.p.done:
		case <-ctx.Done():
			return true, fmt.Errorf("append to shard %q: %w while waiting for an in-flight append of id %q (%w)", w.shard, ctx.Err(), entries[s.i].ID, ErrOutcomeUnknown)
		}
		switch perr := s.ref.p.err; {
		case perr == nil:
			landed = true
			r := s.ref.p.results[s.ref.i]
			r.AlreadyPresent = true
			results[s.i] = r
		case errors.Is(perr, ErrOutcomeUnknown):
			landed = true
			if err == nil || errors.Is(err, errWithdrawn) {
				err = perr
			}
		case !sharesFate(perr, entries[s.i].ID):
			// The other append failed for a reason of its own (an id of
			// its own conflicts, or it was withdrawn): this id was simply
			// not committed, and a try on our own will commit it.
			if err == nil {
				err = errWithdrawn
			}
		case err == nil || errors.Is(err, errWithdrawn):
			err = perr
		}
	}
	return landed, err
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
	w.forgetLocked(p)
	w.mu.Unlock()
	p.finish(results, err)
}

// forgetLocked drops p's ids from inflight. The caller holds mu.
func (w *writer) forgetLocked(p *pending) {
	for _, e := range p.entries {
		if ref, ok := w.inflight[e.ID]; ok && ref.p == p {
			delete(w.inflight, e.ID)
		}
	}
}

// forgetAllLocked forgets the ids of the appends of one commit under the
// caller's one hold of mu: a group commit of many appends would otherwise
// take it once for each.
func (w *writer) forgetAllLocked(ps []*pending) {
	for _, p := range ps {
		w.forgetLocked(p)
	}
}

// finishAll finishes the appends of one commit with their results or
// err. results holds the results of every entry of ps, in order
// (encodeBatch); each append gets its own run of them, capped, so that
// appending to it cannot reach the next append's.
func finishAll(ps []*pending, results []Result, err error) {
	off := 0
	for _, p := range ps {
		if err != nil {
			p.finish(nil, err)
			continue
		}
		end := off + len(p.entries)
		p.finish(results[off:end:end], nil)
		off = end
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
