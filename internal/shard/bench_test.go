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
