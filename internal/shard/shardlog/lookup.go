package shardlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// LoadIndex returns the footer index of generation g, from the cache or with
// one ranged GET of its footer.
func LoadIndex(ctx context.Context, store blob.Store, cache *BlobCache, shard string, g *storagepb.Generation) (*Index, error) {
	ref := RefOf(shard, g)
	if idx, ok := cache.GetIndex(ref); ok {
		if err := checkPutID(shard, g, idx.Footer); err != nil {
			return nil, err
		}
		return idx, nil
	}
	name := ref.Key.Blob(shard)
	tail, _, err := store.Get(ctx, name, blob.GetOptions{Offset: int64(g.GetFooterOffset())})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read footer of %s: %w", shard, name, err)
	}
	f, err := format.DecodeFooter(tail, g.GetFooterOffset())
	if err != nil {
		return nil, CorruptOrReplaced(ctx, store, shard, g, name, err)
	}
	if err := checkPutID(shard, g, f); err != nil {
		return nil, err
	}
	if f.GetShard() != shard || f.GetEpoch() != g.GetEpoch() || f.GetGeneration() != g.GetNumber() || f.GetPosition() != g.GetPosition() {
		return nil, fmt.Errorf("%w: blob %s: footer names shard %q epoch %d generation %d", ErrCorrupt, name, f.GetShard(), f.GetEpoch(), f.GetGeneration())
	}
	idx := NewIndex(f)
	cache.AddIndex(ref, idx)
	return idx, nil
}

// checkPutID verifies that f is the footer of the log batch the manifest
// lists as g. A log position that a merge retired and GC collected may be
// created again by a create that was still in flight (a fence, which holds
// no records); a reader with a manifest that still lists the batch then
// finds other bytes there, which it reads as the batch being gone
// (blob.ErrNotFound), so that it reads the manifest again.
func checkPutID(shard string, g *storagepb.Generation, f *storagepb.Footer) error {
	if g.GetPosition() == 0 || g.GetPutId() == "" || f.GetPutId() == g.GetPutId() {
		return nil
	}
	return fmt.Errorf("shard %q: log position %d holds put %q, not the listed batch %q: %w", shard, g.GetPosition(), f.GetPutId(), g.GetPutId(), blob.ErrNotFound)
}

// LoadFilter returns the id filter of generation g, from the cache or with
// one ranged GET.
func LoadFilter(ctx context.Context, store blob.Store, cache *BlobCache, shard string, g *storagepb.Generation) (*bloom.BloomFilter, error) {
	ref := RefOf(shard, g)
	if f, ok := cache.GetFilter(ref); ok {
		return f, nil
	}
	name := ref.Key.Blob(shard)
	n := int64(g.GetFilterLength())
	b, _, err := store.Get(ctx, name, blob.GetOptions{Offset: int64(g.GetFooterOffset()) - n, Length: n})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read id filter of %s: %w", shard, name, err)
	}
	f, err := format.DecodeFilter(b, g.GetFilterCrc32C())
	if err != nil {
		return nil, CorruptOrReplaced(ctx, store, shard, g, name, err)
	}
	cache.AddFilter(ref, f)
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
func LookupCommitted(ctx context.Context, store blob.Store, cache *BlobCache, shard string, gens []*storagepb.Generation, ids []string, out map[string]Found) error {
	for _, g := range gens {
		f, err := LoadFilter(ctx, store, cache, shard, g)
		if err != nil {
			return err
		}
		var idx *Index
		for _, id := range ids {
			if _, done := out[id]; done || !f.TestString(id) {
				continue
			}
			if idx == nil {
				if idx, err = LoadIndex(ctx, store, cache, shard, g); err != nil {
					return err
				}
			}
			if e, ok := idx.ByID[id]; ok {
				out[id] = Found{Entry: e, Gen: g}
			}
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
func CorruptOrReplaced(ctx context.Context, store blob.Store, shard string, g *storagepb.Generation, name string, err error) error {
	corrupt := fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	if g.GetPosition() == 0 || g.GetPutId() == "" {
		return corrupt
	}
	data, _, gerr := store.Get(ctx, name, blob.GetOptions{})
	if errors.Is(gerr, blob.ErrNotFound) {
		return fmt.Errorf("shard %q: %s is gone: %w", shard, name, gerr)
	}
	if gerr != nil {
		// Undecided: the bytes may be a late fence's, which a read of the
		// view again would step past. Say what stopped the re-read (a
		// storage error, the call's end), never ErrCorrupt: a healthy
		// shard must not answer DATA_LOSS for a failed read.
		return fmt.Errorf("shard %q: %s failed its check (%v), and re-reading it to tell a late fence from corruption failed: %w", shard, name, err, gerr)
	}
	if f, derr := format.DecodeLogEntry(shard, g.GetPosition(), data); derr == nil && f.GetPutId() != g.GetPutId() {
		return fmt.Errorf("shard %q: %s holds put %q, not the listed batch %q: %w", shard, name, f.GetPutId(), g.GetPutId(), blob.ErrNotFound)
	}
	return corrupt
}
