package shard

import (
	"context"
	"fmt"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// loadIndex returns the footer index of generation g, from the cache or with
// one ranged GET of its footer.
func loadIndex(ctx context.Context, store blob.Store, cache *BlobCache, shard string, g *storagepb.Generation) (*index, error) {
	ref := refOf(shard, g)
	if idx, ok := cache.getIndex(ref); ok {
		return idx, nil
	}
	name := ref.name()
	tail, _, err := store.Get(ctx, name, blob.GetOptions{Offset: int64(g.GetFooterOffset())})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read footer of %s: %w", shard, name, err)
	}
	f, err := format.DecodeFooter(tail, g.GetFooterOffset())
	if err != nil {
		return nil, fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	}
	if f.GetShard() != shard || f.GetEpoch() != g.GetEpoch() || f.GetGeneration() != g.GetNumber() || f.GetPosition() != g.GetPosition() {
		return nil, fmt.Errorf("%w: blob %s: footer names shard %q epoch %d generation %d", ErrCorrupt, name, f.GetShard(), f.GetEpoch(), f.GetGeneration())
	}
	idx := newIndex(f)
	cache.addIndex(ref, idx)
	return idx, nil
}

// loadFilter returns the id filter of generation g, from the cache or with
// one ranged GET.
func loadFilter(ctx context.Context, store blob.Store, cache *BlobCache, shard string, g *storagepb.Generation) (*bloom.BloomFilter, error) {
	ref := refOf(shard, g)
	if f, ok := cache.getFilter(ref); ok {
		return f, nil
	}
	name := ref.name()
	n := int64(g.GetFilterLength())
	b, _, err := store.Get(ctx, name, blob.GetOptions{Offset: int64(g.GetFooterOffset()) - n, Length: n})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read id filter of %s: %w", shard, name, err)
	}
	f, err := format.DecodeFilter(b, g.GetFilterCrc32C())
	if err != nil {
		return nil, fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	}
	cache.addFilter(ref, f)
	return f, nil
}

// found is a committed record matching an appended id.
type found struct {
	entry *storagepb.FooterEntry
	gen   *storagepb.Generation
}

// lookupCommitted finds which ids are already committed in gens. Each
// generation's Bloom filter rules most ids out without loading its index,
// so an append of new ids adds no read once the filters are cached.
func lookupCommitted(ctx context.Context, store blob.Store, cache *BlobCache, shard string, gens []*storagepb.Generation, ids []string, out map[string]found) error {
	for _, g := range gens {
		f, err := loadFilter(ctx, store, cache, shard, g)
		if err != nil {
			return err
		}
		var idx *index
		for _, id := range ids {
			if _, done := out[id]; done || !f.TestString(id) {
				continue
			}
			if idx == nil {
				if idx, err = loadIndex(ctx, store, cache, shard, g); err != nil {
					return err
				}
			}
			if e, ok := idx.byID[id]; ok {
				out[id] = found{entry: e, gen: g}
			}
		}
	}
	return nil
}
