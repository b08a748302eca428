package localstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// BenchmarkDeletes measures what the shard collector does after a
// checkpoint: deletes of many log positions of one directory,
// shards/<shard>/_l/<16 hex>, from 1, 8 and 32 goroutines at once. It
// reports the process's CPU (user + system, from getrusage) per delete and
// the directory syncs per delete; the puts that create the blobs are not
// counted. The store's directory is LOCALSTORE_BENCH_DIR, else a
// temporary one: put it on the disk to measure, not on a tmpfs.
//
//	go test -run '^$' -bench Deletes -count 3 ./internal/blob/localstore
func BenchmarkDeletes(b *testing.B) {
	for _, deleters := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("deleters=%d", deleters), func(b *testing.B) {
			benchDeletes(b, deleters)
		})
	}
}

func benchDeletes(b *testing.B, deleters int) {
	// Puts sync files and directories, deletes only directories: the
	// count is reset once the puts are done.
	s, syncs, done := openCountingBenchStore(b)
	defer done()
	ctx := context.Background()
	names := putLogPositions(b, s, b.N)
	syncs.Store(0)
	var next atomic.Int64
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range deleters {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(names)); i = next.Add(1) - 1 {
				if err := s.Delete(ctx, names[i], blob.DeleteOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuSince(&ru0)
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(syncs.Load())/float64(b.N), "dirsyncs/op")
}

// BenchmarkCollectorPass measures the collector's passes over retired log
// positions of one directory, 256 at most (the shard's maxDeletesPerPass):
// one Delete at a time (mode=alone, what it did before DeleteMany) or one
// DeleteMany per pass (mode=together). It reports the process's CPU and
// the directory syncs per delete. Compare the modes with
// benchstat -col /mode; put LOCALSTORE_BENCH_DIR on the disk to measure.
//
//	go test -run '^$' -bench CollectorPass -count 6 ./internal/blob/localstore
func BenchmarkCollectorPass(b *testing.B) {
	for _, mode := range []string{"alone", "together"} {
		b.Run("mode="+mode, func(b *testing.B) { benchCollectorPass(b, mode == "together") })
	}
}

func benchCollectorPass(b *testing.B, together bool) {
	const pass = 256
	s, syncs, done := openCountingBenchStore(b)
	defer done()
	ctx := context.Background()
	names := putLogPositions(b, s, b.N)
	syncs.Store(0)
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for len(names) > 0 {
		chunk := names[:min(len(names), pass)]
		names = names[len(chunk):]
		if together {
			if err := errors.Join(s.DeleteMany(ctx, chunk)...); err != nil {
				b.Fatal(err)
			}
			continue
		}
		for _, n := range chunk {
			if err := s.Delete(ctx, n, blob.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuSince(&ru0))/1e3/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(syncs.Load())/float64(b.N), "dirsyncs/op")
}

// BenchmarkAppendsWhileCollecting: one writer appends log positions
// (create-only, 1 KiB) while one collector deletes the oldest ones from
// the same directory, as after a checkpoint. It reports the process's CPU
// per append (the deletes' included) and directory syncs per append and
// delete together.
//
//	go test -run '^$' -bench AppendsWhileCollecting -count 3 ./internal/blob/localstore
func BenchmarkAppendsWhileCollecting(b *testing.B) {
	s, syncs, done := openCountingBenchStore(b)
	defer done()
	ctx := context.Background()
	data := make([]byte, 1024)
	name := func(i int64) string { return fmt.Sprintf("shards/s/_l/%016x", i+1) }
	var appended atomic.Int64
	var ru0 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	var wg sync.WaitGroup
	wg.Go(func() { // the collector: deletes all but the newest 16
		for i := int64(0); i < int64(b.N)-16; {
			if i >= appended.Load()-16 {
				time.Sleep(100 * time.Microsecond)
				continue
			}
			if err := s.Delete(ctx, name(i), blob.DeleteOptions{}); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	for i := range int64(b.N) {
		if _, err := s.Put(ctx, name(i), data, blob.PutOptions{IfNoneMatch: true}); err != nil {
			b.Fatal(err)
		}
		appended.Add(1)
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuSince(&ru0)
	b.ReportMetric(float64(cpu)/1e3/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(syncs.Load())/float64(b.N), "syncs/op")
}

// openCountingBenchStore opens a bench store (see openBenchStore) that
// counts its fsyncs.
func openCountingBenchStore(b *testing.B) (*Store, *atomic.Int64, func()) {
	syncs := new(atomic.Int64)
	s, _, done := openBenchStore(b, withSync(func(f vfs.File) error {
		syncs.Add(1)
		return f.Sync()
	}))
	return s, syncs, done
}

// cpuSince returns the process's CPU time, user and system, in
// nanoseconds since ru0.
func cpuSince(ru0 *syscall.Rusage) int64 {
	var ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	return ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
}

// putLogPositions puts n log positions of one shard, 1 KiB each, and
// returns their names.
func putLogPositions(b *testing.B, s *Store, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("shards/s/_l/%016x", i+1)
		if _, err := s.Put(context.Background(), names[i], make([]byte, 1024), blob.PutOptions{IfNoneMatch: true}); err != nil {
			b.Fatal(err)
		}
	}
	return names
}
