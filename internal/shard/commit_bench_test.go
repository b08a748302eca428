package shard

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// BenchmarkGroupCommit measures commit batching where it matters: every
// blob write takes 1 ms (an in-memory store behind a fixed delay, so the
// figures do not depend on an emulator), and 1, 8 or 64 clients append one
// 1 KiB record each at a time. With one client every append is its own
// generation; with more, appends that arrive during a commit share the
// next one. It reports records per commit, blob writes (commits and merges)
// per acked append, and the CPU cost (B/op, allocs/op) of each append;
// ns/op is wall time per append across all clients.
//
//	go test -run '^$' -bench GroupCommit -benchmem ./internal/shard
func BenchmarkGroupCommit(b *testing.B) {
	for _, clients := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			fs := faultstore.New(memstore.New(), 1, faultstore.WithRules(faultstore.Rule{
				Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Delay, Delay: time.Millisecond,
			}))
			// Default options, merging included (its PUTs count as writes):
			// with merging off, live generations, and with them the cost
			// of each append's id lookup, would grow with b.N.
			w, err := Open(context.Background(), fs, "bench", Options{Logger: zap.NewNop()})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Abort()
			ctx := context.Background()
			var n atomic.Int64
			fs.ResetCounts()
			b.ReportAllocs()
			b.SetParallelism((clients + 1) / 2) // GOMAXPROCS is 2 here; RunParallel starts GOMAXPROCS×this goroutines
			if clients == 1 {
				b.SetParallelism(1)
			}
			start := time.Now()
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
			el := time.Since(start)
			acked := float64(n.Load())
			// Each commit is one log position (and the open's fence, if any).
			st := w.Stats()
			commits := float64(st.LogTail)
			b.ReportMetric(acked/max(commits, 1), "records/commit")
			b.ReportMetric(float64(fs.InnerCalls(faultstore.OpPut))/max(acked, 1), "writes/append")
			b.ReportMetric(acked/el.Seconds(), "appends/s")
		})
	}
}
