package shardlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Entry is one position of a shard's commit log (protocol v2), as read or
// written: a batch of records, or a fence.
type Entry struct {
	Position uint64
	Epoch    uint64
	Writer   string
	PutID    string
	NextSeq  uint64                // one past the entry's last seq, or a fence's next seq
	Gen      *storagepb.Generation // a batch's descriptor (position set); nil for a fence
	Added    int64                 // when it joined the writer's tail (Unix ns): its checkpoint's clock
}

// Fence reports whether the entry is a fence, which holds no records.
func (e *Entry) Fence() bool { return e.Gen == nil }

// LayoutGeneration is the part of the manifest's descriptor of a blob laid
// out as l that the layout itself fixes, created at created (Unix ns). Log
// batches and the writer's generations share it; each caller adds where its
// blob sits and which records it holds.
func LayoutGeneration(l format.Layout, created int64) *storagepb.Generation {
	return &storagepb.Generation{
		Bytes:            uint64(len(l.Data)),
		FooterOffset:     l.FooterOffset,
		FooterLength:     l.FooterLength,
		FilterLength:     l.FilterLength,
		FilterCrc32C:     l.FilterCRC,
		CreatedUnixNanos: created,
	}
}

// logGeneration is the manifest's descriptor of a log batch laid out as l.
func logGeneration(position uint64, l format.Layout, created int64) *storagepb.Generation {
	f := l.Footer
	n := len(f.GetEntries())
	g := LayoutGeneration(l, created)
	g.Position = position
	g.PutId = f.GetPutId()
	g.Epoch = f.GetEpoch()
	g.FirstSeq = f.GetEntries()[0].GetSeq()
	g.LastSeq = f.GetEntries()[n-1].GetSeq()
	g.Records = uint32(n)
	return g
}

// EntryOf describes the log entry laid out as l at position, and caches a
// batch's index, filter and (small) bytes: id lookups, Gets and merges of
// it then start from memory.
func EntryOf(cache *BlobCache, shard string, position uint64, l format.Layout, created int64) *Entry {
	f := l.Footer
	e := &Entry{Position: position, Epoch: f.GetEpoch(), Writer: f.GetWriter(), PutID: f.GetPutId(), NextSeq: f.GetNextSeq()}
	if f.GetFence() {
		return e
	}
	if c := f.GetCreatedUnixNanos(); c != 0 {
		created = c
	}
	e.Gen = logGeneration(position, l, created)
	cache.AddLayout(RefOf(shard, e.Gen), l)
	return e
}

// ReadEntry reads the shard's log entry at position. A position never
// created, or collected, is blob.ErrNotFound.
func ReadEntry(ctx context.Context, store blob.Store, cache *BlobCache, shard string, position uint64, created int64) (*Entry, error) {
	name := format.LogName(shard, position)
	data, _, err := store.Get(ctx, name, blob.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read log position %d: %w", shard, position, err)
	}
	l, err := format.DecodeLogLayout(shard, position, data)
	if err != nil {
		return nil, fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	}
	return EntryOf(cache, shard, position, l, created), nil
}

// ViewOf is the view of the shard: the checkpoint ckpt with the
// log batches of tail (the positions after it) appended as live
// generations. It shares ckpt's parts, which nobody mutates.
func ViewOf(ckpt *storagepb.Manifest, tail []*Entry) *storagepb.Manifest {
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
		v.NextSeq = max(v.NextSeq, e.NextSeq)
		if e.Gen != nil {
			v.Generations = append(v.Generations, e.Gen)
			v.RecordCount += uint64(e.Gen.GetRecords())
			v.LastCommitUnixNanos = max(v.LastCommitUnixNanos, e.Gen.GetCreatedUnixNanos())
		}
	}
	return v
}

// maxProbeWindow bounds the log positions one probe reads at once.
const maxProbeWindow = 8

// Probe reads the shard's log entries from position from on, until the
// first missing one, and returns those it found, in order. It reads one
// position first, then windows of twice as many at once: a reader that
// read one GET at a time could never catch up with a writer that commits
// one position per round trip. An entry found after a missing one is
// ignored: the first missing position is where the log ended, as of that
// read.
func Probe(ctx context.Context, store blob.Store, cache *BlobCache, shard string, from uint64, created int64) ([]*Entry, error) {
	var found []*Entry
	window := 1
	for {
		got := make([]*Entry, window)
		errs := make([]error, window)
		var wg sync.WaitGroup
		for i := range window {
			wg.Go(func() {
				got[i], errs[i] = ReadEntry(ctx, store, cache, shard, from+uint64(i), created)
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
