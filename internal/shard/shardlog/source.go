package shardlog

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Source is one shard's stored log entries and generations as the writer
// and the read path read them. Each part is read, decoded, checked against
// where it was found and cached here, in one place, through the process's
// shared cache: the callers above never see a blob's bytes before this
// file has checked them.
type Source struct {
	store blob.Store
	cache *BlobCache
	shard string
}

// NewSource returns the shard's blobs in store, cached in cache.
func NewSource(store blob.Store, cache *BlobCache, shard string) Source {
	return Source{store: store, cache: cache, shard: shard}
}

// Entry reads the shard's log entry at position. A position never created,
// or collected, is blob.ErrNotFound.
func (s Source) Entry(ctx context.Context, position uint64, created int64) (*Entry, error) {
	name := format.LogName(s.shard, position)
	data, _, err := s.store.Get(ctx, name, blob.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read log position %d: %w", s.shard, position, err)
	}
	l, err := format.DecodeLogLayout(s.shard, position, data)
	if err != nil {
		return nil, fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	}
	return s.EntryOf(position, l, created), nil
}

// EntryOf describes the log entry laid out as l at position, and caches a
// batch's index, filter and (small) bytes: id lookups, Gets and merges of
// it then start from memory.
func (s Source) EntryOf(position uint64, l format.Layout, created int64) *Entry {
	f := l.Footer
	e := &Entry{Position: position, Epoch: f.GetEpoch(), Writer: f.GetWriter(), PutID: f.GetPutId(), NextSeq: f.GetNextSeq()}
	if f.GetFence() {
		return e
	}
	if c := f.GetCreatedUnixNanos(); c != 0 {
		created = c
	}
	e.Gen = logGeneration(position, l, created)
	s.cache.AddLayout(RefOf(s.shard, e.Gen), l)
	return e
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
func (s Source) Probe(ctx context.Context, from uint64, created int64) ([]*Entry, error) {
	var found []*Entry
	window := 1
	for {
		got := make([]*Entry, window)
		errs := make([]error, window)
		var wg sync.WaitGroup
		for i := range window {
			wg.Go(func() {
				got[i], errs[i] = s.Entry(ctx, from+uint64(i), created)
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

// Index returns the footer index of generation g, from the cache or with
// one ranged GET of its footer.
func (s Source) Index(ctx context.Context, g *storagepb.Generation) (*Index, error) {
	ref := RefOf(s.shard, g)
	if idx, ok := s.cache.GetIndex(ref); ok {
		if err := s.checkPutID(g, idx.Footer); err != nil {
			return nil, err
		}
		return idx, nil
	}
	name := ref.Blob()
	tail, _, err := s.store.Get(ctx, name, blob.GetOptions{Offset: int64(g.GetFooterOffset())})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read footer of %s: %w", s.shard, name, err)
	}
	f, err := format.DecodeFooter(tail, g.GetFooterOffset())
	if err != nil {
		return nil, s.CorruptOrReplaced(ctx, g, name, err)
	}
	if err := s.checkPutID(g, f); err != nil {
		return nil, err
	}
	if f.GetShard() != s.shard || f.GetEpoch() != g.GetEpoch() || f.GetGeneration() != g.GetNumber() || f.GetPosition() != g.GetPosition() {
		return nil, fmt.Errorf("%w: blob %s: footer names shard %q epoch %d generation %d", ErrCorrupt, name, f.GetShard(), f.GetEpoch(), f.GetGeneration())
	}
	idx := NewIndex(f, name)
	s.cache.AddIndex(ref, idx)
	return idx, nil
}

// checkPutID verifies that f is the footer of the log batch the manifest
// lists as g. A log position that a merge retired and GC collected may be
// created again by a create that was still in flight (a fence, which holds
// no records); a reader with a manifest that still lists the batch then
// finds other bytes there, which it reads as the batch being gone
// (blob.ErrNotFound), so that it reads the manifest again.
func (s Source) checkPutID(g *storagepb.Generation, f *storagepb.Footer) error {
	if g.GetPosition() == 0 || g.GetPutId() == "" || f.GetPutId() == g.GetPutId() {
		return nil
	}
	return fmt.Errorf("shard %q: log position %d holds put %q, not the listed batch %q: %w", s.shard, g.GetPosition(), f.GetPutId(), g.GetPutId(), blob.ErrNotFound)
}

// Filter returns the id filter of generation g, from the cache or with
// one ranged GET.
func (s Source) Filter(ctx context.Context, g *storagepb.Generation) (*bloom.BloomFilter, error) {
	ref := RefOf(s.shard, g)
	if f, ok := s.cache.GetFilter(ref); ok {
		return f, nil
	}
	name := ref.Blob()
	n := int64(g.GetFilterLength())
	b, _, err := s.store.Get(ctx, name, blob.GetOptions{Offset: int64(g.GetFooterOffset()) - n, Length: n})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read id filter of %s: %w", s.shard, name, err)
	}
	f, err := format.DecodeFilter(b, g.GetFilterCrc32C())
	if err != nil {
		return nil, s.CorruptOrReplaced(ctx, g, name, err)
	}
	s.cache.AddFilter(ref, f)
	return f, nil
}

// Found is a committed record matching an appended id.
type Found struct {
	Entry *storagepb.FooterEntry
	Gen   *storagepb.Generation
}

// LookupCommitted finds which ids are already committed in gens. Each
// generation's Bloom filter rules most ids out without loading its index,
// so an append of new ids adds no read once the filters are cached.
func (s Source) LookupCommitted(ctx context.Context, gens []*storagepb.Generation, ids []string, out map[string]Found) error {
	for _, g := range gens {
		f, err := s.Filter(ctx, g)
		if err != nil {
			return err
		}
		if err := s.LookupIn(ctx, g, f, ids, out); err != nil {
			return err
		}
	}
	return nil
}

// LookupIn finds which ids not in out yet are committed in generation g,
// whose id filter is f, and adds them to out. It reads g's index only for
// an id the filter does not rule out.
func (s Source) LookupIn(ctx context.Context, g *storagepb.Generation, f *bloom.BloomFilter, ids []string, out map[string]Found) error {
	var idx *Index
	for _, id := range ids {
		if _, done := out[id]; done || !f.TestString(id) {
			continue
		}
		if idx == nil {
			var err error
			if idx, err = s.Index(ctx, g); err != nil {
				return err
			}
		}
		if e, ok := idx.ByID[id]; ok {
			out[id] = Found{Entry: e, Gen: g}
		}
	}
	return nil
}

// CorruptOrReplaced classifies err, the failure to verify bytes of blob
// name, which holds generation g: ErrCorrupt, except for a log batch
// listed with its put id whose position now holds another valid log
// entry: it was collected and created again by a late fence (see
// checkPutID), which reads as the batch being gone, so that the caller
// reads the manifest again. When the blob cannot be read whole to tell,
// the re-read's error is returned. Only this error path reads the blob
// whole.
func (s Source) CorruptOrReplaced(ctx context.Context, g *storagepb.Generation, name string, err error) error {
	corrupt := fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	if g.GetPosition() == 0 || g.GetPutId() == "" {
		return corrupt
	}
	data, _, gerr := s.store.Get(ctx, name, blob.GetOptions{})
	if errors.Is(gerr, blob.ErrNotFound) {
		return fmt.Errorf("shard %q: %s is gone: %w", s.shard, name, gerr)
	}
	if gerr != nil {
		// Undecided: the bytes may be a late fence's, which a read of the
		// view again would step past. Say what stopped the re-read (a
		// storage error, the call's end), never ErrCorrupt: a healthy
		// shard must not answer DATA_LOSS for a failed read.
		return fmt.Errorf("shard %q: %s failed its check (%v), and re-reading it to tell a late fence from corruption failed: %w", s.shard, name, err, gerr)
	}
	if f, derr := format.DecodeLogEntry(s.shard, g.GetPosition(), data); derr == nil && f.GetPutId() != g.GetPutId() {
		return fmt.Errorf("shard %q: %s holds put %q, not the listed batch %q: %w", s.shard, name, f.GetPutId(), g.GetPutId(), blob.ErrNotFound)
	}
	return corrupt
}
