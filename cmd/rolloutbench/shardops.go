package main

import (
	"context"
	"strings"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// shardOps is a blob.Store decorator that counts operations by kind and by
// the class of the shard a blob belongs to, so that target 8 can say which
// shards' store operations a subscription caused: rolloutd's own counters
// (rolloutd_blob_operations_total) have the kind but not the shard.
//
// A blob under shards/<shard>/_… is of classify(shard); a listing whose
// prefix names one shard is that shard's; any other listing (finding the
// shards under a prefix) is of class "listing"; every other blob (consumer
// positions, the store's own) is of class "other".
type shardOps struct {
	next blob.Store

	mu       sync.Mutex
	classify func(shard string) string
	counts   map[opKey]float64
}

// opKey is one counter: the class of the blob's shard and the op kind
// (as rolloutd_blob_operations_total's op label).
type opKey struct{ class, op string }

var _ blob.Store = (*shardOps)(nil)

func newShardOps(next blob.Store, classify func(string) string) *shardOps {
	return &shardOps{next: next, classify: classify, counts: map[opKey]float64{}}
}

// snapshot returns the counts so far.
func (s *shardOps) snapshot() map[opKey]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[opKey]float64, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

// opsSince is after − before, per counter.
func opsSince(after, before map[opKey]float64) map[opKey]float64 {
	out := map[opKey]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// shardOfName returns the shard a blob name under shards/ belongs to.
func shardOfName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "shards/")
	if !ok {
		return "", false
	}
	// A shard's segments never start with '_'; its blobs' names continue
	// with "/_".
	i := strings.Index(rest, "/_")
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

func (s *shardOps) count(name, op string) {
	class := "other"
	if sh, ok := shardOfName(name); ok {
		class = s.classify(sh)
	} else if op == "list" && strings.HasPrefix(name, "shards/") {
		class = "listing"
	}
	s.mu.Lock()
	s.counts[opKey{class, op}]++
	s.mu.Unlock()
}

// Get implements blob.Store.
func (s *shardOps) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	s.count(name, "get")
	return s.next.Get(ctx, name, opts)
}

// Head implements blob.Store.
func (s *shardOps) Head(ctx context.Context, name string) (blob.Attrs, error) {
	s.count(name, "head")
	return s.next.Head(ctx, name)
}

// Put implements blob.Store.
func (s *shardOps) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	s.count(name, opts.OpName())
	return s.next.Put(ctx, name, data, opts)
}

// Delete implements blob.Store.
func (s *shardOps) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	s.count(name, "delete")
	return s.next.Delete(ctx, name, opts)
}

// List implements blob.Store.
func (s *shardOps) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	s.count(opts.Prefix, "list")
	return s.next.List(ctx, opts)
}
