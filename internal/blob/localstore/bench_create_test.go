package localstore

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// BenchmarkCreateOnly measures the production write pattern alone: 64
// writers put 1 KiB blobs create-only under shards/<shard>/_l/<16 hex>,
// over 100 shards (writer w's i-th put on shard (w+64i)%100) and over one. Besides
// ns/op it reports the process's CPU (user + system, from getrusage) per
// put and the mean group size. The store's directory is
// LOCALSTORE_BENCH_DIR, else a temporary one: put it on the disk to
// measure, not on a tmpfs (and see openBenchStore).
//
//	go test -run '^$' -bench CreateOnly -count 3 ./internal/blob/localstore
func BenchmarkCreateOnly(b *testing.B) {
	for _, shards := range []int{100, 1} {
		b.Run(fmt.Sprintf("writers=64/shards=%d", shards), func(b *testing.B) {
			benchCreateOnly(b, 64, shards)
		})
	}
}

func benchCreateOnly(b *testing.B, writers, shards int) {
	s, meanGroup, done := openBenchStore(b)
	defer done()
	data := make([]byte, 1024)
	ctx := context.Background()
	var seq, next atomic.Int64
	b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := int(next.Add(1) - 1)
		for i := 0; pb.Next(); i++ {
			name := fmt.Sprintf("shards/s%d/_l/%016x", (w+i*writers)%shards, seq.Add(1))
			if _, err := s.Put(ctx, name, data, blob.PutOptions{IfNoneMatch: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/op")
	b.ReportMetric(meanGroup(), "puts/group")
}
