package localstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// BenchmarkBarriers measures the store alone under the load of many
// writers on many shards: each of 64 writers, on a shard of its own among
// 100, puts a generation-sized blob create-only and then compare-and-swaps
// its manifest, like a shard commit. It runs each Barrier for a second,
// in rounds that rotate their order, and reports for each the median of
// the rounds' appends/s, its ratio to BarrierFsync's in the same rounds,
// CPU per append and the mean group size. The store's directory is
// LOCALSTORE_BENCH_DIR, else a temporary one: put it on the disk to
// measure, not on a tmpfs.
//
//	go test -run '^$' -bench Barriers -benchtime 3x ./internal/blob/localstore
//
// -benchtime Nx runs N rounds (at least 3 are used).
func BenchmarkBarriers(b *testing.B) {
	const writers, shards = 64, 100
	modes := []struct {
		name string
		b    Barrier
	}{{"fsync", BarrierFsync}, {"syncfs", BarrierSyncfs}, {"auto", BarrierAuto}}
	rounds := max(b.N, 3)
	rates := map[string][]float64{}
	cpus := map[string][]float64{}
	sizes := map[string][]float64{}
	for r := range rounds {
		for k := range modes {
			m := modes[(k+r)%len(modes)]
			rate, cpu, size := runBarrierRound(b, m.b, writers, shards, time.Second)
			rates[m.name] = append(rates[m.name], rate)
			cpus[m.name] = append(cpus[m.name], cpu)
			sizes[m.name] = append(sizes[m.name], size)
		}
	}
	base := median(rates["fsync"])
	for _, m := range modes {
		b.ReportMetric(median(rates[m.name]), m.name+"-appends/s")
		b.ReportMetric(median(rates[m.name])/base, m.name+"-vs-fsync")
		b.ReportMetric(median(cpus[m.name]), m.name+"-cpu-µs/append")
		b.ReportMetric(median(sizes[m.name]), m.name+"-puts/group")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func runBarrierRound(b *testing.B, barrier Barrier, writers, shards int, d time.Duration) (rate, cpuPerAppend, groupSize float64) {
	b.Helper()
	s, meanGroup, done := openBenchStore(b, WithBarrier(barrier))
	defer done()
	gen, man := make([]byte, 1400), make([]byte, 300)
	var appends atomic.Int64
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	start := time.Now()
	end := start.Add(d)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var etag blob.ETag
			for i := 0; time.Now().Before(end); i++ {
				sh := fmt.Sprintf("shards/s%d", (w+i*writers)%shards)
				if _, err := s.Put(ctx, fmt.Sprintf("%s/_g/%d-%d", sh, w, i), gen, blob.PutOptions{IfNoneMatch: true}); err != nil {
					errs <- err
					return
				}
				a, err := s.Put(ctx, fmt.Sprintf("shards/s%d/_manifest-%d", w%shards, w), man, blob.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""})
				if err != nil {
					errs <- err
					return
				}
				etag = a.ETag
				appends.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	n := float64(appends.Load())
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	return n / el.Seconds(), float64(cpu.Microseconds()) / n, meanGroup()
}

// openBenchStore opens a store in a new directory below
// LOCALSTORE_BENCH_DIR, else a temporary one, and returns it with the mean
// size of its groups so far and a func that closes and removes it.
//
// On ext4 without a journal (this machine's root file system), creating a
// file skips every inode of its block group freed in the last minutes
// (recently_deleted in the kernel), so the removal of one run's directory
// slows the creates of the next ones: compare before and after in
// alternation, or use a journaled file system.
func openBenchStore(b *testing.B, opts ...Option) (s *Store, meanGroup func() float64, done func()) {
	b.Helper()
	dir := os.Getenv("LOCALSTORE_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	dir, err := os.MkdirTemp(dir, "bench-")
	if err != nil {
		b.Fatal(err)
	}
	var puts, groups atomic.Int64
	s, err = Open(dir, append(opts, WithGroupObserver(func(n int, _ time.Duration) {
		puts.Add(int64(n))
		groups.Add(1)
	}))...)
	if err != nil {
		_ = os.RemoveAll(dir)
		b.Fatal(err)
	}
	meanGroup = func() float64 { return float64(puts.Load()) / float64(max(groups.Load(), 1)) }
	return s, meanGroup, func() {
		_ = s.Close()
		_ = os.RemoveAll(dir)
	}
}
