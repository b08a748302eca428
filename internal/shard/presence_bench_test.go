package shard

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// BenchmarkAppendMemstoreInherited is BenchmarkAppendMemstore on a shard
// whose writer inherits 48 log batches (about what a lone client's batches
// reach before their merge lands) from the previous one: every append's ids
// are looked up in those beside the batches this writer commits itself.
func BenchmarkAppendMemstoreInherited(b *testing.B) {
	ctx := context.Background()
	store := memstore.New()
	prev, err := Open(ctx, store, "bench", Options{Logger: zap.NewNop(), DisableBackground: true})
	if err != nil {
		b.Fatal(err)
	}
	for g := range 48 {
		batch := make([]Entry, 20)
		for i := range batch {
			batch[i] = kib1Entry(b, fmt.Sprintf("old-%d-%d", g, i))
		}
		if _, err := prev.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := prev.Close(ctx); err != nil {
		b.Fatal(err)
	}
	w, err := Open(ctx, store, "bench", Options{Logger: zap.NewNop(), Presence: NewPresenceBudget(benchPresenceBytes)})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	rec := record("x")
	rec.Content = string(make([]byte, 1024))
	b.ReportAllocs()
	defer reportCPU(b)()
	var n int
	for b.Loop() {
		n++
		rec.Id = fmt.Sprint("id-", n)
		e, err := Prepare(rec, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Append(ctx, []Entry{e}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(w.w.manifest().GetGenerations())), "live-gens")
}

// BenchmarkAppendMemstore100Shards is the server's shape at 64 clients
// over 100 shards: 100 resident writers on one store, sharing one blob
// cache of the server's default size, and single-record appends spread
// over them by 64 goroutines, under one presence budget.
func BenchmarkAppendMemstore100Shards(b *testing.B) {
	ctx := context.Background()
	store := memstore.New()
	cache := NewBlobCache(64 << 20)
	presence := NewPresenceBudget(benchPresenceBytes)
	ws := make([]*Writer, 100)
	for i := range ws {
		w, err := Open(ctx, store, fmt.Sprintf("bench-%03d", i), Options{Logger: zap.NewNop(), Cache: cache, Presence: presence})
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	b.Cleanup(func() {
		for _, w := range ws {
			w.Abort()
		}
	})
	var n atomic.Int64
	b.ReportAllocs()
	defer reportCPU(b)()
	b.SetParallelism(32) // 64 goroutines on the 2 cores of the machine this was tuned on
	b.RunParallel(func(pb *testing.PB) {
		rec := record("x")
		rec.Content = string(make([]byte, 1024))
		for pb.Next() {
			k := n.Add(1)
			rec.Id = fmt.Sprint("id-", k)
			e, err := Prepare(rec, time.Now())
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := ws[k%int64(len(ws))].Append(ctx, []Entry{e}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	var gens int
	for _, w := range ws {
		gens += len(w.w.manifest().GetGenerations())
	}
	b.ReportMetric(float64(gens)/float64(len(ws)), "live-gens/shard")
	b.ReportMetric(float64(presence.Bytes())/float64(len(ws)), "presence-B/shard")
}

// benchPresenceBytes is the server's default presence budget
// (server.DefaultPresenceBudgetBytes), which the benchmarks' writers share
// as the server's do.
const benchPresenceBytes = 64 << 20

// reportCPU reports the process's CPU time (user and system) per
// iteration, from now until the returned function is called: on a shared
// machine that is steadier than ns/op, which also counts waiting for the
// cores, and it counts the committer's and the background's goroutines.
func reportCPU(b *testing.B) func() {
	start := cpuNanos(b)
	return func() {
		b.ReportMetric(float64(cpuNanos(b)-start)/float64(b.N), "cpu-ns/op")
	}
}

func cpuNanos(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkFindPresent is the presence path alone, without a commit: an
// append's look-up of one new id on a writer that committed 48 batches of
// its own, which it remembers, and inherited none or 48, whose filters it
// keeps.
func BenchmarkFindPresent(b *testing.B) {
	for _, inherited := range []int{0, 48} {
		b.Run(fmt.Sprint("inherited-", inherited), func(b *testing.B) { benchFindPresent(b, inherited) })
	}
}

func benchFindPresent(b *testing.B, inherited int) {
	ctx := context.Background()
	store := memstore.New()
	opts := Options{Logger: zap.NewNop(), DisableBackground: true}
	prev, err := Open(ctx, store, "bench", opts)
	if err != nil {
		b.Fatal(err)
	}
	for g := range inherited {
		if _, err := prev.Append(ctx, []Entry{kib1Entry(b, fmt.Sprint("old-", g))}); err != nil {
			b.Fatal(err)
		}
	}
	prev.Abort() // no checkpoint: the batches stay in the log
	opts.Presence = NewPresenceBudget(benchPresenceBytes)
	opts.CheckpointEvery = 64 // the writer's own batches stay in its tail
	w, err := Open(ctx, store, "bench", opts)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	for g := range 48 {
		if _, err := w.Append(ctx, []Entry{kib1Entry(b, fmt.Sprint("own-", g))}); err != nil {
			b.Fatal(err)
		}
	}
	e := []Entry{kib1Entry(b, "new")}
	present := map[string]shardlog.Found{}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if err := w.w.findPresent(ctx, e, present); err != nil {
			b.Fatal(err)
		}
		w.w.mu.Unlock()
	}
	if len(present) != 0 {
		b.Fatalf("found %d", len(present))
	}
}
