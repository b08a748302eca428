package read

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// ReaderOptions configures a Reader.
type ReaderOptions struct {
	// Logger; nil means no logging.
	Logger *zap.Logger
	// Cache holds generation indexes, filters and small blobs; share the
	// writers' cache.
	Cache *shardlog.BlobCache
	// MaxManifests bounds how many shards' last manifests are kept for
	// conditional GETs. Default 4096.
	MaxManifests int
}

// Reader reads records of any shard. It holds no shard state beyond caches,
// so any instance can use it with or without a resident writer.
type Reader struct {
	store blob.Store
	cache *shardlog.BlobCache
	log   *zap.Logger

	mu        sync.Mutex
	manifests *simplelru.LRU[string, cachedManifest]
}

type cachedManifest struct {
	m    *storagepb.Manifest // never mutated once cached
	etag blob.ETag
	// Protocol v2: the log entries after m's checkpoint that a read found,
	// in position order from LogCheckpoint+1, and the view they make with m.
	tail []*shardlog.Entry
	view *storagepb.Manifest
}

// NewReader returns a Reader over store.
func NewReader(store blob.Store, opts ReaderOptions) *Reader {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Cache == nil {
		opts.Cache = shardlog.NewBlobCache(shardlog.DefaultCacheBytes)
	}
	if opts.MaxManifests <= 0 {
		opts.MaxManifests = 4096
	}
	lru, err := simplelru.NewLRU[string, cachedManifest](opts.MaxManifests, nil)
	if err != nil {
		panic(err) // only for a non-positive size
	}
	return &Reader{store: store, cache: opts.Cache, log: opts.Logger, manifests: lru}
}

// maxViewRestarts bounds how often one read starts its probe of the log
// again because a checkpoint covered the position it found missing.
const maxViewRestarts = 32

// Manifest reads the shard's current manifest. It returns the reader's
// view: the manifest, which is a checkpoint, with the log's batches after
// the checkpoint appended as live generations (issue 21, section 7), so
// that it lists every append acknowledged before the call began. The
// result must not be modified. A v1 shard, which no writer has claimed
// since builds before the log, is a checkpoint through position 0 of an
// empty log; its first claim converts it.
//
// A read probes the log positions after the checkpoint until the first
// missing one, then confirms that the log ended there with a manifest GET
// sent after that probe returned: a missing position is either the end of
// the log or one already collected, and a position is collected only after
// a checkpoint covering it is durable. If the manifest now covers the
// missing position, the read starts again from its checkpoint. A reader
// that cached a shard probes its cached tail's next position first, so
// that the manifest GET is a conditional one that confirms it.
func (r *Reader) Manifest(ctx context.Context, shard string) (*storagepb.Manifest, error) {
	r.mu.Lock()
	cached, ok := r.manifests.Get(shard)
	r.mu.Unlock()
	var base cachedManifest
	if ok {
		base = cached
	} else {
		m, etag, err := r.fetch(ctx, shard, cachedManifest{})
		if err != nil {
			return nil, err
		}
		base = cachedManifest{m: m, etag: etag}
	}
	for range maxViewRestarts {
		next := base.m.GetLogCheckpoint() + uint64(len(base.tail)) + 1
		src := r.source(shard)
		found, err := src.Probe(ctx, next, 0)
		if err != nil {
			return nil, err
		}
		base.tail = append(base.tail[:len(base.tail):len(base.tail)], found...)
		missing := next + uint64(len(found))
		// The confirming read: sent after the probe returned.
		m, etag, err := r.fetch(ctx, shard, base)
		if err != nil {
			return nil, err
		}
		if m.GetLogCheckpoint() < base.m.GetLogCheckpoint() {
			// A new incarnation: probe afresh.
			base = cachedManifest{m: m, etag: etag}
			continue
		}
		tail := base.tail
		for len(tail) > 0 && tail[0].Position <= m.GetLogCheckpoint() {
			tail = tail[1:]
		}
		if m.GetLogCheckpoint() >= missing {
			// The missing position was collected, or created and covered
			// since: start again from the new checkpoint.
			base = cachedManifest{m: m, etag: etag, tail: tail}
			continue
		}
		c := cachedManifest{m: m, etag: etag, tail: tail, view: shardlog.ViewOf(m, tail)}
		r.remember(shard, c)
		return c.view, nil
	}
	return nil, fmt.Errorf("shard %q: the log kept being checkpointed past every read of its tail: %w", shard, blob.ErrUnavailable)
}

// LastSeqRead is the shard's last seq in the view this Reader last read
// of it, and whether it holds one: what the read that just returned saw,
// without another read.
func (r *Reader) LastSeqRead(shard string) (uint64, bool) {
	r.mu.Lock()
	c, ok := r.manifests.Get(shard)
	r.mu.Unlock()
	if !ok || c.view == nil || c.view.GetNextSeq() == 0 {
		return 0, false
	}
	return c.view.GetNextSeq() - 1, true
}

// LastCommitRead is when the shard was last committed to in the view this
// Reader last read of it (the writer's clock), and whether it holds a view
// that says.
func (r *Reader) LastCommitRead(shard string) (time.Time, bool) {
	r.mu.Lock()
	c, ok := r.manifests.Get(shard)
	r.mu.Unlock()
	if !ok || c.view == nil || c.view.GetLastCommitUnixNanos() == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, c.view.GetLastCommitUnixNanos()), true
}

// fetch reads the shard's manifest, conditionally when base holds one.
func (r *Reader) fetch(ctx context.Context, shard string, base cachedManifest) (*storagepb.Manifest, blob.ETag, error) {
	name := format.ManifestName(shard)
	var opts blob.GetOptions
	if base.m != nil {
		opts.IfNoneMatch = base.etag
	}
	data, attrs, err := r.store.Get(ctx, name, opts)
	switch {
	case base.m != nil && errors.Is(err, blob.ErrNotModified):
		return base.m, base.etag, nil
	case errors.Is(err, blob.ErrNotFound):
		return nil, "", fmt.Errorf("shard %q: %w", shard, shardlog.ErrShardNotFound)
	case err != nil:
		return nil, "", fmt.Errorf("shard %q: read manifest: %w", shard, err)
	}
	m, err := format.DecodeManifest(data)
	if err != nil {
		return nil, "", fmt.Errorf("%w: blob %s: %w", shardlog.ErrCorrupt, name, err)
	}
	return m, attrs.ETag, nil
}

func (r *Reader) remember(shard string, c cachedManifest) {
	r.mu.Lock()
	r.manifests.Add(shard, c)
	r.mu.Unlock()
}

// source is the shard's blobs as this reader reads them: through the
// shared cache.
func (r *Reader) source(shard string) shardlog.Source {
	return shardlog.NewSource(r.store, r.cache, shard)
}
