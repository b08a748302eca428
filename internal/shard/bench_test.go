package shard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// BenchmarkAppendMemstore is the writer's own CPU cost per single-record
// append: the in-memory store does no I/O, so there is no floor to compare.
func BenchmarkAppendMemstore(b *testing.B) {
	w, err := Open(context.Background(), memstore.New(), "bench", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	ctx := context.Background()
	rec := record("x")
	rec.Content = string(make([]byte, 1024))
	b.ReportAllocs()
	defer reportCPU(b)()
	var n atomic.Int64
	b.Cleanup(func() {
		st := w.Stats()
		b.Logf("records %d, generations %d, retired %d (in %d batches of runs), merges %d", st.Records, st.Generations, st.Retired, len(w.w.manifest().GetRetiredRuns()), st.Merges)
	})
	b.ResetTimer()
	for b.Loop() {
		rec.Id = fmt.Sprint("id-", n.Add(1))
		e, err := Prepare(rec, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Append(ctx, []Entry{e}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendMemstoreParallel shows group commit's CPU side: many
// appenders share each generation.
func BenchmarkAppendMemstoreParallel(b *testing.B) {
	w, err := Open(context.Background(), memstore.New(), "bench", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	defer reportCPU(b)()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		rec := record("x")
		rec.Content = string(make([]byte, 1024))
		for pb.Next() {
			rec.Id = fmt.Sprint("id-", n.Add(1))
			e, err := Prepare(rec, time.Now())
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := w.Append(ctx, []Entry{e}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(w.Stats().Records)/float64(max(1, w.w.manifest().GetNextGeneration()-1)), "records/generation")
}

// readBenchShard is a closed shard of 2,000 1 KiB records in 40 batches,
// on the in-memory store, and a reader with warm caches: what the read
// path costs beyond its I/O.
func readBenchShard(b *testing.B) (*Reader, []string) {
	ctx := context.Background()
	store := memstore.New()
	w, err := Open(ctx, store, "bench", Options{Logger: zap.NewNop(), DisableBackground: true})
	if err != nil {
		b.Fatal(err)
	}
	var all []string
	for g := range 40 {
		batch := make([]Entry, 50)
		for i := range batch {
			id := fmt.Sprintf("id-%d-%d", g, i)
			batch[i] = kib1Entry(b, id)
			all = append(all, id)
		}
		if _, err := w.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	r := NewReader(store, ReaderOptions{})
	if _, err := r.BatchGet(ctx, "bench", all, BatchGetOptions{MaxBytes: 64 << 20}); err != nil {
		b.Fatal(err)
	}
	return r, all
}

// BenchmarkGetMemstore is one Get with warm caches (the speculative path).
func BenchmarkGetMemstore(b *testing.B) {
	r, all := readBenchShard(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := r.Get(ctx, "bench", all[(i*7)%len(all)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatchGetMemstore is a BatchGet of 100 ids spread over every
// generation.
func BenchmarkBatchGetMemstore(b *testing.B) {
	r, all := readBenchShard(b)
	ctx := context.Background()
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = all[(i*37)%len(all)]
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.BatchGet(ctx, "bench", ids, BatchGetOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanMemstore scans the whole shard, decoding every record.
func BenchmarkScanMemstore(b *testing.B) {
	r, all := readBenchShard(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		if err := r.Scan(ctx, "bench", ScanOptions{}, func(bt Batch) error { n += len(bt.Records); return nil }); err != nil || n != len(all) {
			b.Fatalf("scan: %d records, %v", n, err)
		}
	}
}
