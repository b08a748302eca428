package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

func smallEntry(tb testing.TB, id string) Entry {
	rec := record(id)
	rec.Content = string(make([]byte, 200))
	e, err := Prepare(rec, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// BenchmarkAzuriteFill100k fills one shard with 100,000 records in
// single-record appends from 32 clients while merges run, sampling the live
// generation count throughout; then it compares Get p50 on that shard with
// Get p50 on a shard of 100 records, from a fresh reader (another instance),
// in the same run.
//
//	go test -run '^$' -bench AzuriteFill100k -benchtime 1x ./internal/shard
func BenchmarkAzuriteFill100k(b *testing.B) {
	const total, clients = 100_000, 32
	for b.Loop() {
		// On disk: Azurite's in-memory extent store does not reclaim the
		// space of deleted blobs soon enough for merges' rewrites.
		inst := azurite.Start(b, azurite.Options{OnDisk: true})
		ctx := context.Background()
		store, err := azure.New(ctx, azure.Config{Container: "fill", ConnectionString: inst.ConnectionString})
		if err != nil {
			b.Fatal(err)
		}
		defer store.Close()
		cache := NewIndexCache(64 << 20)
		// Warnings (a failing merge, say) are the first thing to read when
		// the generation count climbs.
		warn, err := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
		if err != nil {
			b.Fatal(err)
		}
		opts := Options{Logger: warn, Cache: cache}
		big, err := Open(ctx, store, "big", opts)
		if err != nil {
			b.Fatal(err)
		}
		var maxGens atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if g := int64(big.Stats().Generations); g > maxGens.Load() {
					maxGens.Store(g)
				}
			}
		})
		var n atomic.Int64
		start := time.Now()
		var cwg sync.WaitGroup
		for range clients {
			cwg.Go(func() {
				for {
					i := n.Add(1)
					if i > total {
						return
					}
					if _, err := big.Append(ctx, []Entry{smallEntry(b, fmt.Sprint("id-", i))}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		cwg.Wait()
		fill := time.Since(start)
		close(stop)
		wg.Wait()
		st := big.Stats()
		if err := big.Close(ctx); err != nil {
			b.Fatal(err)
		}

		small, err := Open(ctx, store, "small", opts)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			if _, err := small.Append(ctx, []Entry{smallEntry(b, fmt.Sprint("id-", i+1))}); err != nil {
				b.Fatal(err)
			}
		}
		if err := small.Close(ctx); err != nil {
			b.Fatal(err)
		}
		reader := NewReader(store, ReaderOptions{Cache: NewIndexCache(64 << 20)})
		getP50 := func(shard string, n int) time.Duration {
			var ds []time.Duration
			for range 400 {
				id := fmt.Sprint("id-", 1+rand.IntN(n))
				t0 := time.Now()
				if _, err := reader.Get(ctx, shard, id); err != nil {
					b.Fatalf("Get(%s, %s): %v", shard, id, err)
				}
				ds = append(ds, time.Since(t0))
			}
			return p50(ds)
		}
		// Interleave to share the machine's noise.
		s1, b1 := getP50("small", 100), getP50("big", total)
		s2, b2 := getP50("small", 100), getP50("big", total)
		smallP50, bigP50 := min(s1, s2), min(b1, b2)
		b.ReportMetric(float64(total)/fill.Seconds(), "fill-appends/s")
		b.ReportMetric(float64(maxGens.Load()), "max-live-generations")
		b.ReportMetric(float64(st.Generations), "final-live-generations")
		b.ReportMetric(float64(st.Merges), "merges")
		b.ReportMetric(float64(smallP50.Microseconds()), "get100-p50-µs")
		b.ReportMetric(float64(bigP50.Microseconds()), "get100k-p50-µs")
		b.ReportMetric(float64(bigP50)/float64(smallP50), "get100k/get100")
	}
}

// BenchmarkAzuriteMemory1000Shards appends 200,000 records across 1,000
// resident writers on an on-disk Azurite and compares the Go heap in use
// (after GC) at 50,000 and at 200,000 appends: the writers' memory must not
// grow per append. The index cache is bounded at 8 MiB, so it is full by
// the first measurement.
//
//	go test -run '^$' -bench AzuriteMemory1000Shards -benchtime 1x ./internal/shard
func BenchmarkAzuriteMemory1000Shards(b *testing.B) {
	const shards, total, clients = 1000, 200_000, 8
	for b.Loop() {
		inst := azurite.Start(b, azurite.Options{OnDisk: true})
		ctx := context.Background()
		store, err := azure.New(ctx, azure.Config{Container: "memory", ConnectionString: inst.ConnectionString})
		if err != nil {
			b.Fatal(err)
		}
		opts := Options{Logger: zap.NewNop(), Cache: NewIndexCache(8 << 20)}
		ws := make([]*Writer, shards)
		for i := range ws {
			if ws[i], err = Open(ctx, store, fmt.Sprint("s", i), opts); err != nil {
				b.Fatal(err)
			}
		}
		heap := func() uint64 {
			runtime.GC()
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapInuse
		}
		var n atomic.Int64
		begin := time.Now()
		run := func(upTo int64) {
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for {
						i := n.Add(1)
						if i > upTo {
							return
						}
						if i%5000 == 0 && testing.Verbose() {
							fmt.Fprintf(os.Stderr, "memory1000: %d appends, %s\n", i, time.Since(begin).Round(time.Second))
						}
						w := ws[rand.IntN(shards)]
						if _, err := w.Append(ctx, []Entry{smallEntry(b, fmt.Sprint("id-", i))}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			n.Store(upTo)
		}
		// Heap at every 25,000 appends, printed under -v as it goes: a run
		// takes tens of minutes on on-disk Azurite, and the curve shows
		// growth per append better than its two ends.
		var at50k, at200k uint64
		for upTo := int64(25_000); upTo <= total; upTo += 25_000 {
			run(upTo)
			h := heap()
			switch upTo {
			case 50_000:
				at50k = h
			case total:
				at200k = h
			}
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "memory1000: %d appends, heap in use %.1f MiB, %s\n",
					upTo, float64(h)/(1<<20), time.Since(begin).Round(time.Second))
			}
		}
		elapsed := time.Since(begin)
		for _, w := range ws {
			w.Abort()
		}
		_ = store.Close()
		b.ReportMetric(float64(total)/elapsed.Seconds(), "appends/s")
		b.ReportMetric(float64(at50k)/(1<<20), "heap50k-MiB")
		b.ReportMetric(float64(at200k)/(1<<20), "heap200k-MiB")
		b.ReportMetric(float64(at200k)/float64(at50k), "heap200k/heap50k")
	}
}
