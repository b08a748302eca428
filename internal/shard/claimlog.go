package shard

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// errReclaim: a higher epoch claimed the shard while this writer was
// opening its log; Open claims again, after it.
var errReclaim = errors.New("shard claimed by a higher epoch while opening its log")

// openLog finishes a protocol v2 claim (issue 21, section 4). The claim CAS
// made this writer the owner of w.m's epoch; now it
//
//  1. finds the log's tail by probing forward from the checkpoint,
//     reading every position it inherits (their ids are looked up like the
//     checkpoint's generations);
//  2. creates a fence at the first free position, moving forward on
//     "exists", unless no other writer can have a create in doubt (fenceNeeded);
//  3. confirms with a CAS on the manifest it claimed that checkpoints
//     through the fence: it lands only if no one claimed since, so the
//     writer's epoch is still current, and the checkpoint it replaces is
//     the one the probe started from, below the fence. Nothing below the
//     fence can be collected unless a checkpoint covers it, and that
//     checkpoint is this one.
//
// It returns errReclaim when a higher epoch got there first.
func (w *writer) openLog(ctx context.Context) error {
	w.ckpt, w.tail = w.m, nil
	w.filtered, w.pinned = filteredOf(w.m, &w.written, nil)
	w.ckptLanded = make(chan struct{})
	w.last = w.ckpt.GetLogCheckpoint()
	now := w.opts.Clock.Now().UnixNano()
	found, err := shardlog.NewSource(w.store, w.opts.Cache, w.shard).Probe(ctx, w.last+1, now)
	if err != nil {
		return fmt.Errorf("open shard %q: probe the log: %w", w.shard, err)
	}
	for _, e := range found {
		if e.Epoch > w.epoch {
			return errReclaim
		}
		w.addTailLocked(e, now)
	}
	fenced := false
	if w.fenceNeeded() {
		for {
			pos := w.last + 1
			putID := w.nextPutID()
			l, err := format.EncodeFence(format.LogEntry{Shard: w.shard, Epoch: w.epoch, Position: pos, Writer: w.id, PutID: putID, NextSeq: w.m.GetNextSeq()})
			if err != nil {
				return err
			}
			res, err := w.createAt(ctx, pos, l.Data, putID)
			if err != nil {
				return fmt.Errorf("open shard %q: fence the log: %w", w.shard, err)
			}
			if res.outcome == created {
				w.addTailLocked(w.source().EntryOf(pos, l, now), now)
				break
			}
			if res.found.Epoch > w.epoch {
				return errReclaim
			}
			// An earlier writer's create landed first: part of the log.
			w.addTailLocked(res.found, now)
		}
		fenced = true
		w.fences.Add(1)
		if w.opts.OnFence != nil {
			w.opts.OnFence()
		}
	}
	if w.last == w.ckpt.GetLogCheckpoint() {
		// Nothing inherited, nothing fenced (none was needed): nothing to
		// confirm.
		w.claimed = true
		return nil
	}
	if err := w.confirm(ctx); err != nil {
		return err
	}
	w.claimed = true
	if fenced {
		w.opts.Logger.Info("fenced the shard's log", zap.String("shard", w.shard), zap.Uint64("epoch", w.epoch), zap.Uint64("position", w.last))
	}
	return nil
}

// fenceNeeded reports whether another writer may still have a create of a
// log position in doubt. Not when the claim created the shard, or replaced
// a protocol v1 manifest (no writer had ever claimed it under v2, so none
// created a position), or replaced the manifest of this process's previous
// writer of the shard, which ended with every create answered (Lineage).
func (w *writer) fenceNeeded() bool {
	r := w.replaced
	if r == nil || !hasLog(r) {
		return false
	}
	return !w.opts.Lineage.cleanEnd(w.shard, r.GetOwner())
}

// addTailLocked adds e, the entry at w.last+1, to the writer's log view.
// The caller holds mu, or is Open.
func (w *writer) addTailLocked(e *shardlog.Entry, created int64) {
	if e.Gen != nil && e.Gen.GetCreatedUnixNanos() == 0 {
		e.Gen.CreatedUnixNanos = created
	}
	e.Added = created
	w.tail = append(w.tail, e)
	w.last = e.Position
	// Each commit extends the view rather than build it again from the
	// checkpoint, which copied every live generation: viewGens is the
	// room the views since viewOf's base share, good while w.m is the
	// view it was extended into.
	gens := w.viewGens
	if w.viewOf != w.m {
		gens = nil
	}
	w.m, w.viewGens = shardlog.Extend(w.m, gens, e)
	w.viewOf = w.m
	if e.Gen != nil && !w.written.holds(e.Gen) {
		// In place: a reader of an earlier w.filtered reads only below
		// its length (see filtered).
		w.filtered = append(w.filtered, &filteredGen{gen: e.Gen})
	}
}

// confirm is the claim's confirming step: a CAS on the claimed manifest
// that checkpoints through w.last.
func (w *writer) confirm(ctx context.Context) error {
	next := w.checkpointOf(w.m, w.last)
	data, err := format.EncodeManifest(next)
	if err != nil {
		return err
	}
	name := format.ManifestName(w.shard)
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	for {
		attrs, err := w.store.Put(ctx, name, data, blob.PutOptions{IfMatch: w.etag, PutID: next.GetCommitId()})
		if err == nil {
			w.landLocked(next, attrs.ETag, w.last)
			return nil
		}
		if errors.Is(err, blob.ErrUnavailable) {
			if werr := b.Wait(ctx); werr != nil {
				return fmt.Errorf("open shard %q: confirm the claim: %w (last error: %w)", w.shard, werr, err)
			}
			continue
		}
		m, etag, rerr := shardlog.ReadManifest(ctx, w.store, w.shard)
		switch {
		case rerr != nil:
			return fmt.Errorf("open shard %q: confirm the claim: %w, and re-reading the manifest: %w", w.shard, err, rerr)
		case m.GetCommitId() == next.GetCommitId():
			w.landLocked(m, etag, w.last)
			return nil
		}
		// Another claim (or a delete) replaced the manifest: claim again,
		// after it.
		return errReclaim
	}
}

// checkpointOf builds the checkpoint of view through position: a copy of
// the view, which lists every batch up to position, stamped afresh.
func (w *writer) checkpointOf(view *storagepb.Manifest, through uint64) *storagepb.Manifest {
	next := checkpointCopy(view)
	// The view lists the batches after through too, if any landed since:
	// a checkpoint lists only what it covers.
	keep := next.Generations[:0]
	next.RecordCount = 0
	for _, g := range next.Generations {
		if g.GetPosition() <= through {
			keep = append(keep, g)
			next.RecordCount += uint64(g.GetRecords())
		}
	}
	next.Generations = keep
	next.NextSeq = w.ckpt.GetNextSeq()
	for _, e := range w.tail {
		if e.Position <= through {
			next.NextSeq = max(next.NextSeq, e.NextSeq)
		}
	}
	next.LogCheckpoint = through
	next.Protocol = format.ProtocolV2
	next.CommitId = w.nextPutID()
	next.UpdatedUnixNanos = w.opts.Clock.Now().UnixNano()
	next.NextGeneration = max(next.GetNextGeneration(), w.minGen)
	return next
}

// landLocked makes next, whose ETag is etag and which checkpoints through
// position through, the writer's durable checkpoint. The caller holds mu,
// or is Open.
func (w *writer) landLocked(next *storagepb.Manifest, etag blob.ETag, through uint64) {
	i := 0
	for i < len(w.tail) && w.tail[i].Position <= through {
		i++
	}
	w.tail = append([]*shardlog.Entry(nil), w.tail[i:]...)
	w.ckpt, w.etag = next, etag
	w.m = shardlog.ViewOf(next, w.tail)
	w.retainPresenceLocked()
	if w.ckptLanded != nil {
		close(w.ckptLanded)
	}
	w.ckptLanded = make(chan struct{})
}
