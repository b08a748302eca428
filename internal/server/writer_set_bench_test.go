package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// Benchmarks of the writer set's LRU and pinning, the part of every Append
// that finds the shard's writer.
//
//	go test -run '^$' -bench WriterSet -benchmem ./internal/server

func benchWriterSet(b *testing.B, maxWriters int) *writerSet {
	b.Helper()
	store := memstore.New()
	open := func(ctx context.Context, shardName string) (*shard.Writer, error) {
		return shard.Open(ctx, store, shardName, shard.Options{Logger: zap.NewNop()})
	}
	ws := newWriterSet(maxWriters, open, 10*time.Second, appendRetry{DefaultAppendAttempts, DefaultRetryBackoff}, zap.NewNop(), NewMetrics())
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ws.closeAll(ctx)
	})
	return ws
}

func benchShards(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("bench/s%04d", i)
	}
	return names
}

// BenchmarkWriterSetHit: acquire and release a resident writer (pin, LRU
// touch, unpin), cycling over 64 resident shards.
func BenchmarkWriterSetHit(b *testing.B) {
	ws := benchWriterSet(b, 128)
	names := benchShards(64)
	ctx := context.Background()
	for _, n := range names { // open them all first
		h, err := ws.acquire(ctx, n)
		if err != nil {
			b.Fatal(err)
		}
		ws.release(h)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := ws.acquire(ctx, names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		ws.release(h)
		i++
	}
}

// BenchmarkWriterSetHitParallel: the same from many goroutines at once,
// which all take the set's one mutex.
func BenchmarkWriterSetHitParallel(b *testing.B) {
	ws := benchWriterSet(b, 128)
	names := benchShards(64)
	ctx := context.Background()
	for _, n := range names {
		h, err := ws.acquire(ctx, n)
		if err != nil {
			b.Fatal(err)
		}
		ws.release(h)
	}
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			h, err := ws.acquire(ctx, names[i%len(names)])
			if err != nil {
				b.Error(err)
				return
			}
			ws.release(h)
			i++
		}
	})
}

// BenchmarkWriterSetMiss: every acquire misses an LRU of 8 over 16 shards
// cycled in order, so each one opens a writer (an epoch claim on the
// in-memory store) and evicts, and so aborts, the least recently used.
func BenchmarkWriterSetMiss(b *testing.B) {
	ws := benchWriterSet(b, 8)
	names := benchShards(16)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h, err := ws.acquire(ctx, names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		ws.release(h)
		i++
	}
	b.ReportMetric(float64(ws.resident()), "held")
}

// BenchmarkWriterSetPinnedEviction: a writer stays pinned (a long request)
// while other shards' acquires evict it from an LRU of 1 over and over;
// the eviction is deferred, and every acquire of the pinned shard makes
// it resident again without reopening it.
func BenchmarkWriterSetPinnedEviction(b *testing.B) {
	ws := benchWriterSet(b, 1)
	ctx := context.Background()
	pinned, err := ws.acquire(ctx, "bench/pinned")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.release(pinned) })
	other, err := ws.acquire(ctx, "bench/other")
	if err != nil {
		b.Fatal(err)
	}
	ws.release(other)
	b.ReportAllocs()
	for b.Loop() {
		h, err := ws.acquire(ctx, "bench/pinned") // resident again: evicts "other"
		if err != nil {
			b.Fatal(err)
		}
		if h != pinned {
			b.Fatal("the pinned writer was reopened")
		}
		ws.release(h)
		h, err = ws.acquire(ctx, "bench/other") // reopens "other", evicts the pinned one (deferred)
		if err != nil {
			b.Fatal(err)
		}
		ws.release(h)
	}
}
