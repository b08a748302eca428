package shard

import (
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// index is a generation's footer, keyed by record id.
type index struct {
	footer *storagepb.Footer
	byID   map[string]*storagepb.FooterEntry
	bytes  int64
}

// perEntryOverhead approximates the heap cost of one footer entry plus its
// map slot, beyond the id's bytes.
const perEntryOverhead = 160

func newIndex(f *storagepb.Footer) *index {
	idx := &index{footer: f, byID: make(map[string]*storagepb.FooterEntry, len(f.GetEntries()))}
	for _, e := range f.GetEntries() {
		idx.byID[e.GetId()] = e
		idx.bytes += int64(len(e.GetId())) + perEntryOverhead
	}
	return idx
}

// IndexCache holds generation footer indexes, bounded in bytes. Generations
// are immutable, so an index cached by blob name never goes stale. One cache
// is meant to be shared by every writer and reader of a process.
type IndexCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[string, *index]
	bytes int64
	max   int64
}

// NewIndexCache returns a cache that holds at most maxBytes of indexes.
func NewIndexCache(maxBytes int64) *IndexCache {
	c := &IndexCache{max: maxBytes}
	// The LRU's own count limit is never the binding one; bytes are.
	lru, err := simplelru.NewLRU[string, *index](1<<30, func(_ string, v *index) { c.bytes -= v.bytes })
	if err != nil {
		panic(err) // only for a non-positive size
	}
	c.lru = lru
	return c
}

func (c *IndexCache) get(name string) (*index, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(name)
}

func (c *IndexCache) add(name string, idx *index) {
	if idx.bytes > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.lru.Peek(name); ok {
		c.bytes -= old.bytes
	}
	c.lru.Add(name, idx)
	c.bytes += idx.bytes
	for c.bytes > c.max {
		c.lru.RemoveOldest()
	}
}

// Bytes reports the cache's current size, for metrics.
func (c *IndexCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
