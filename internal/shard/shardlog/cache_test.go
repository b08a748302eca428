package shardlog

import (
	"fmt"
	"testing"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The server's memory under many shards rests on this bound: the cache
// is the only per-generation state a process keeps after the writer that
// made the generation is gone.
func TestBlobCacheStaysWithinItsBytes(t *testing.T) {
	const max = 64 << 10
	c := NewBlobCache(max)
	for i := range 1000 {
		g := Ref{Shard: fmt.Sprintf("s%d", i%97), Key: format.GenKey{Epoch: 0, Number: uint64(i)}}
		c.AddData(g, make([]byte, 1000+i%3000))
		c.AddIndex(g, NewIndex(&storagepb.Footer{Entries: []*storagepb.FooterEntry{{Id: fmt.Sprintf("id-%d", i)}}}, "blob"))
		if b := c.Bytes(); b > max {
			t.Fatalf("after %d generations the cache holds %d bytes, more than its %d", i+1, b, max)
		}
	}
	var held int64
	for _, k := range c.lru.Keys() {
		v, _ := c.lru.Peek(k)
		held += v.bytes
	}
	if held != c.Bytes() {
		t.Fatalf("entries add up to %d bytes, the cache counts %d", held, c.Bytes())
	}
	if _, ok := c.GetData(Ref{Shard: "s0", Key: format.GenKey{Number: 0}}); ok {
		t.Fatal("the oldest generation is still cached")
	}
	if _, ok := c.GetData(Ref{Shard: fmt.Sprintf("s%d", 999%97), Key: format.GenKey{Number: 999}}); !ok {
		t.Fatal("the newest generation is not cached")
	}
}
