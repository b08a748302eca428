package shardlog

import (
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Index is a generation's footer, keyed by record id, and the name of the
// blob it indexes, so that a read planned from the index reads that blob
// without naming it again. It is shared through the cache: nobody mutates
// it.
type Index struct {
	Footer *storagepb.Footer
	ByID   map[string]*storagepb.FooterEntry
	Blob   string
}

// perEntryOverhead approximates the heap cost of one footer entry plus its
// map slot, beyond the id's bytes.
const perEntryOverhead = 160

// NewIndex indexes footer f, of the blob named blob, by record id.
func NewIndex(f *storagepb.Footer, blob string) *Index {
	idx := &Index{Footer: f, ByID: make(map[string]*storagepb.FooterEntry, len(f.GetEntries())), Blob: blob}
	for _, e := range f.GetEntries() {
		idx.ByID[e.GetId()] = e
	}
	return idx
}

func (idx *Index) size() int64 {
	var n int64
	for _, e := range idx.Footer.GetEntries() {
		n += int64(len(e.GetId())) + perEntryOverhead
	}
	return n + int64(len(idx.Blob))
}

// Ref names a generation of a shard in the cache without formatting its
// blob name, which the id lookups of every append would otherwise do once
// per live generation.
type Ref struct {
	Shard string
	Key   format.GenKey
}

// RefOf is the cache's name of generation g of the shard.
func RefOf(shard string, g *storagepb.Generation) Ref { return Ref{shard, format.KeyOf(g)} }

// Blob names the blob that holds the generation.
func (r Ref) Blob() string { return r.Key.Blob(r.Shard) }

// cacheKey separates a generation's cached parts.
type cacheKey struct {
	gen  Ref
	part cachePart
}

type cachePart int

const (
	partIndex cachePart = iota
	partFilter
	partData // a small generation's whole blob, for merges
)

type cacheEntry struct {
	idx    *Index
	filter *bloom.BloomFilter
	data   []byte
	bytes  int64
}

// maxCachedGeneration is the largest generation blob kept whole: a small
// generation is merged soon after it is written, and reading it back would
// cost a GET per commit.
const maxCachedGeneration = 256 << 10

// BlobCache holds what the writers and readers of a process keep of
// generation blobs: footer indexes, id filters, and small recent
// generations whole, for the merges and folds that soon rewrite them. It is
// bounded in bytes. Generations are immutable, so an entry cached by blob
// name never goes stale. One cache is meant to be shared by every writer
// and reader of a process.
type BlobCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[cacheKey, cacheEntry]
	bytes int64
	max   int64
}

// NewBlobCache returns a cache that holds at most maxBytes.
func NewBlobCache(maxBytes int64) *BlobCache {
	c := &BlobCache{max: maxBytes}
	// The LRU's own count limit is never the binding one; bytes are.
	lru, err := simplelru.NewLRU[cacheKey, cacheEntry](1<<30, func(_ cacheKey, v cacheEntry) { c.bytes -= v.bytes })
	if err != nil {
		panic(err) // only for a non-positive size
	}
	c.lru = lru
	return c
}

// GetIndex returns g's cached footer index.
func (c *BlobCache) GetIndex(g Ref) (*Index, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(cacheKey{gen: g, part: partIndex})
	return e.idx, ok
}

// GetFilter returns g's cached id filter.
func (c *BlobCache) GetFilter(g Ref) (*bloom.BloomFilter, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(cacheKey{gen: g, part: partFilter})
	return e.filter, ok
}

// GetData returns g's cached whole blob.
func (c *BlobCache) GetData(g Ref) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(cacheKey{gen: g, part: partData})
	return e.data, ok
}

// AddData keeps a small generation's bytes for the merge that will soon
// read them; larger ones are not worth the memory.
func (c *BlobCache) AddData(g Ref, data []byte) {
	if len(data) <= maxCachedGeneration {
		c.add(cacheKey{gen: g, part: partData}, cacheEntry{data: data, bytes: int64(cap(data))})
	}
}

// AddIndex caches g's footer index.
func (c *BlobCache) AddIndex(g Ref, idx *Index) {
	c.add(cacheKey{gen: g, part: partIndex}, cacheEntry{idx: idx, bytes: idx.size()})
}

// AddFilter caches g's id filter.
func (c *BlobCache) AddFilter(g Ref, f *bloom.BloomFilter) {
	c.add(cacheKey{gen: g, part: partFilter}, cacheEntry{filter: f, bytes: int64(f.Cap()/8) + 64})
}

// AddLayout caches the index, id filter and (when small) bytes of g, laid
// out as l, as its writer knows them: lookups, Gets and merges of a blob
// just written then start from memory.
func (c *BlobCache) AddLayout(g Ref, l format.Layout) {
	c.AddIndex(g, NewIndex(l.Footer, g.Blob()))
	c.AddFilter(g, l.Filter)
	c.AddData(g, l.Data)
}

func (c *BlobCache) add(k cacheKey, v cacheEntry) {
	if v.bytes > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.lru.Peek(k); ok {
		c.bytes -= old.bytes
	}
	c.lru.Add(k, v)
	c.bytes += v.bytes
	for c.bytes > c.max {
		c.lru.RemoveOldest()
	}
}

// Purge empties the cache, as a process that restarted would find it.
func (c *BlobCache) Purge() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Purge()
}

// Bytes reports the cache's current size, for metrics.
func (c *BlobCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
