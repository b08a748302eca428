package shard

import (
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Lineage is a process's memory of how its last writer of each shard ended
// (protocol v2). A new writer must fence the log unless no other writer can
// still have a create in doubt: that holds when its claim replaced a
// manifest owned by this process's previous writer of the shard, and that
// writer ended with every create answered. Fences are kept until the shard
// is deleted, so they must count takeovers, not the reopens an LRU of
// writers makes all the time.
//
// A writer reports how it ended when its committer exits, which is after
// its last create was answered or abandoned: an Abort, a Close that timed
// out, or the cleanup of a dropped handle leave the create in flight in
// doubt, with no I/O, and the next open fences. A writer that has not
// reported yet counts as in doubt.
type Lineage struct {
	mu    sync.Mutex
	ended *simplelru.LRU[string, lineageEnd] // by shard
}

type lineageEnd struct {
	writer string
	clean  bool // every create answered
}

// DefaultLineageShards bounds the shards a Lineage remembers; a shard it
// forgot is fenced on its next open, which is always safe.
const DefaultLineageShards = 1 << 16

// NewLineage returns an empty Lineage.
func NewLineage() *Lineage {
	lru, err := simplelru.NewLRU[string, lineageEnd](DefaultLineageShards, nil)
	if err != nil {
		panic(err) // only for a non-positive size
	}
	return &Lineage{ended: lru}
}

// end records that writer, of shard, ended; clean says every create it sent
// was answered.
func (l *Lineage) end(shard, writer string, clean bool) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended.Add(shard, lineageEnd{writer: writer, clean: clean})
}

// cleanEnd reports whether writer, which owned shard's manifest that a new
// claim replaced, was this process's and ended with every create answered.
func (l *Lineage) cleanEnd(shard, writer string) bool {
	if l == nil || writer == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.ended.Get(shard)
	return ok && e.writer == writer && e.clean
}
