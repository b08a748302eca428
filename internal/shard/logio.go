package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// logEntry is one position of a shard's commit log (protocol v2), as read
// or written: a batch of records, or a fence.
type logEntry struct {
	position uint64
	epoch    uint64
	writer   string
	putID    string
	nextSeq  uint64                // one past the entry's last seq, or a fence's next seq
	gen      *storagepb.Generation // a batch's descriptor (position set); nil for a fence
	added    int64                 // when it joined the writer's tail (Unix ns): its checkpoint's clock
}

func (e *logEntry) fence() bool { return e.gen == nil }

// isV2 reports whether m is a protocol v2 manifest: a checkpoint of the log.
func isV2(m *storagepb.Manifest) bool { return m.GetProtocol() == format.ProtocolV2 }

// logGeneration is the manifest's descriptor of a log batch laid out as l.
func logGeneration(position uint64, l format.Layout, created int64) *storagepb.Generation {
	f := l.Footer
	n := len(f.GetEntries())
	return &storagepb.Generation{
		Position:         position,
		PutId:            f.GetPutId(),
		Epoch:            f.GetEpoch(),
		FirstSeq:         f.GetEntries()[0].GetSeq(),
		LastSeq:          f.GetEntries()[n-1].GetSeq(),
		Records:          uint32(n),
		Bytes:            uint64(len(l.Data)),
		FooterOffset:     l.FooterOffset,
		FooterLength:     l.FooterLength,
		FilterLength:     l.FilterLength,
		FilterCrc32C:     l.FilterCRC,
		CreatedUnixNanos: created,
	}
}

// entryOf describes the log entry laid out as l at position, and caches a
// batch's index, filter and (small) bytes: id lookups, Gets and merges of
// it then start from memory.
func entryOf(cache *BlobCache, shard string, position uint64, l format.Layout, created int64) *logEntry {
	f := l.Footer
	e := &logEntry{position: position, epoch: f.GetEpoch(), writer: f.GetWriter(), putID: f.GetPutId(), nextSeq: f.GetNextSeq()}
	if f.GetFence() {
		return e
	}
	if c := f.GetCreatedUnixNanos(); c != 0 {
		created = c
	}
	e.gen = logGeneration(position, l, created)
	ref := shardlog.RefOf(shard, e.gen)
	cache.AddIndex(ref, shardlog.NewIndex(f))
	cache.AddFilter(ref, l.Filter)
	cache.AddData(ref, l.Data)
	return e
}

// readLogEntry reads the shard's log entry at position. A position never
// created, or collected, is blob.ErrNotFound.
func readLogEntry(ctx context.Context, store blob.Store, cache *BlobCache, shard string, position uint64, created int64) (*logEntry, error) {
	name := format.LogName(shard, position)
	data, _, err := store.Get(ctx, name, blob.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read log position %d: %w", shard, position, err)
	}
	l, err := format.DecodeLogLayout(shard, position, data)
	if err != nil {
		return nil, fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	}
	return entryOf(cache, shard, position, l, created), nil
}

// createOutcome is what a create of one log position came to.
type createOutcome int

const (
	// created: this writer's entry is at the position.
	created createOutcome = iota
	// taken: another writer's entry is at the position (createResult.found).
	taken
)

// createResult is a decided create: created, or taken by found.
type createResult struct {
	outcome createOutcome
	found   *logEntry
}

// errUndecided: a create was sent and neither its answer nor a read of the
// position decided it before ctx ended. It may still land.
var errUndecided = errors.New("create of a log position undecided")

// createAt creates the log entry data, whose put id is putID, at position,
// create-only, and decides the outcome (issue 21, section 3). An answer of
// "exists", or of unknown outcome, is decided by reading the position: this
// writer's put id means it landed, another entry that the position is
// taken. A position read as missing after an unknown outcome is created
// again. Every try sends data unchanged, with the same put id.
//
// Its error wraps errUndecided when a try may have landed (it may land
// yet); any other error means nothing of it is stored.
func (w *writer) createAt(ctx context.Context, position uint64, data []byte, putID string) (createResult, error) {
	name := format.LogName(w.shard, position)
	opts := blob.PutOptions{IfNoneMatch: true, PutID: putID}
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	var last error
	mayHaveLanded := false
	for {
		if err := ctx.Err(); err != nil {
			return createResult{}, w.undecided(mayHaveLanded, position, err, last)
		}
		_, err := w.store.Put(ctx, name, data, opts)
		switch {
		case err == nil:
			return createResult{outcome: created}, nil
		case errors.Is(err, blob.ErrUnavailable):
			// Known not applied: send the same create again.
			last = err
			if werr := b.Wait(ctx); werr != nil {
				return createResult{}, w.undecided(mayHaveLanded, position, werr, last)
			}
			continue
		case errors.Is(err, blob.ErrInvalidName), errors.Is(err, blob.ErrNoSpace),
			errors.Is(err, blob.ErrStoreFailed) && !errors.Is(err, blob.ErrOutcomeUnknown):
			// Not applied, and retrying cannot help (a full store only
			// once something frees space: the writer stays, and its
			// next batch tries this position again).
			return createResult{}, w.undecided(mayHaveLanded, position, err, last)
		case errors.Is(err, blob.ErrConditionFailed):
		default:
			// Unknown outcome, or a failure that does not say it was not
			// applied (the writer's context ending among them).
			mayHaveLanded = true
		}
		last = err
		e, rerr := w.readPosition(ctx, position, b)
		switch {
		case rerr == nil && e.putID == putID:
			return createResult{outcome: created}, nil
		case rerr == nil:
			return createResult{outcome: taken, found: e}, nil
		case !errors.Is(rerr, blob.ErrNotFound):
			return createResult{}, w.undecided(mayHaveLanded, position, rerr, last)
		case errors.Is(err, blob.ErrConditionFailed) && !mayHaveLanded:
			// It existed and is gone: collected, which only a checkpoint
			// covering it allows, by a writer that took the shard over.
			// Nothing of this writer's is there, and it must not create
			// into a collected position.
			return createResult{}, fmt.Errorf("shard %q epoch %d: log position %d was collected under this writer: %w", w.shard, w.epoch, position, ErrStale)
		}
		// Missing after an unknown outcome: create it again.
		if werr := b.Wait(ctx); werr != nil {
			return createResult{}, w.undecided(true, position, werr, last)
		}
	}
}

// readPosition reads the log entry at position, retrying retryable
// failures until ctx ends. A missing position is blob.ErrNotFound.
func (w *writer) readPosition(ctx context.Context, position uint64, b *shardlog.Backoff) (*logEntry, error) {
	for {
		e, err := readLogEntry(ctx, w.store, w.opts.Cache, w.shard, position, w.opts.Clock.Now().UnixNano())
		if err == nil || !retryable(err) {
			return e, err
		}
		if werr := b.Wait(ctx); werr != nil {
			return nil, fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}

// undecided is the error of a create that stopped with err: it wraps
// errUndecided when a try may have landed.
func (w *writer) undecided(mayHaveLanded bool, position uint64, err, last error) error {
	if last != nil && !errors.Is(err, last) {
		err = fmt.Errorf("%w (last storage error: %w)", err, last)
	}
	if !mayHaveLanded {
		return fmt.Errorf("shard %q: create log position %d: %w", w.shard, position, err)
	}
	return fmt.Errorf("shard %q epoch %d: create of log position %d (%w): %w", w.shard, w.epoch, position, errUndecided, err)
}

// viewOf is the writer's view of the shard: the checkpoint ckpt with the
// log batches of tail (the positions after it) appended as live
// generations. It shares ckpt's parts, which nobody mutates.
func viewOf(ckpt *storagepb.Manifest, tail []*logEntry) *storagepb.Manifest {
	if len(tail) == 0 {
		return ckpt
	}
	v := &storagepb.Manifest{
		Epoch:            ckpt.GetEpoch(),
		Owner:            ckpt.GetOwner(),
		NextGeneration:   ckpt.GetNextGeneration(),
		NextSeq:          ckpt.GetNextSeq(),
		Generations:      ckpt.GetGenerations()[:len(ckpt.GetGenerations()):len(ckpt.GetGenerations())],
		RetiredBatches:   ckpt.GetRetiredBatches(),
		RetiredRuns:      ckpt.GetRetiredRuns(),
		Epochs:           ckpt.GetEpochs(),
		CommitId:         ckpt.GetCommitId(),
		UpdatedUnixNanos: ckpt.GetUpdatedUnixNanos(),
		RecordCount:      ckpt.GetRecordCount(),
		LogCheckpoint:    ckpt.GetLogCheckpoint(),
		Protocol:         ckpt.GetProtocol(),

		Incarnation:         ckpt.GetIncarnation(),
		Tombstone:           ckpt.GetTombstone(),
		CreatedUnixNanos:    ckpt.GetCreatedUnixNanos(),
		LastCommitUnixNanos: ckpt.GetLastCommitUnixNanos(),
		DeletedThroughEpoch: ckpt.GetDeletedThroughEpoch(),
	}
	for _, e := range tail {
		v.NextSeq = max(v.NextSeq, e.nextSeq)
		if e.gen != nil {
			v.Generations = append(v.Generations, e.gen)
			v.RecordCount += uint64(e.gen.GetRecords())
			v.LastCommitUnixNanos = max(v.LastCommitUnixNanos, e.gen.GetCreatedUnixNanos())
		}
	}
	return v
}

// maxProbeWindow bounds the log positions one probe reads at once.
const maxProbeWindow = 8

// probeLog reads the shard's log entries from position from on, until the
// first missing one, and returns those it found, in order. It reads one
// position first, then windows of twice as many at once: a reader that
// read one GET at a time could never catch up with a writer that commits
// one position per round trip. An entry found after a missing one is
// ignored: the first missing position is where the log ended, as of that
// read.
func probeLog(ctx context.Context, store blob.Store, cache *BlobCache, shard string, from uint64, created int64) ([]*logEntry, error) {
	var found []*logEntry
	window := 1
	for {
		got := make([]*logEntry, window)
		errs := make([]error, window)
		var wg sync.WaitGroup
		for i := range window {
			wg.Go(func() {
				got[i], errs[i] = readLogEntry(ctx, store, cache, shard, from+uint64(i), created)
			})
		}
		wg.Wait()
		for i := range window {
			if errors.Is(errs[i], blob.ErrNotFound) {
				return found, nil
			}
			if errs[i] != nil {
				return found, errs[i]
			}
			found = append(found, got[i])
		}
		from += uint64(window)
		window = min(2*window, maxProbeWindow)
	}
}
