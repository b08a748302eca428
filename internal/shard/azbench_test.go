package shard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// These benchmarks measure the writer against Azurite and report ratios to
// baselines taken in the same run, since absolute times on a shared 2-core
// machine mean little.
//
//	go test -run '^$' -bench Azurite -benchtime 300x ./internal/shard

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// alternate runs b's iterations as floor and product operations in
// alternating blocks of ten, with a pause before each block, so that a
// writer's background work (merges, GC) lands in its own blocks rather than
// in the floor's. Each function times its own operation.
func alternate(b *testing.B, pause time.Duration, floor, product func(i int) time.Duration) (floors, products []time.Duration) {
	i := 0
	for b.Loop() {
		i++
		if i%10 == 1 {
			time.Sleep(pause)
		}
		if (i-1)/10%2 == 0 {
			floors = append(floors, floor(i))
		} else {
			products = append(products, product(i))
		}
	}
	if len(products) == 0 {
		b.Fatalf("%d iterations are all floor: alternating blocks of ten need -benchtime of at least 20x", i)
	}
	return floors, products
}

func kib1Entry(tb testing.TB, id string) Entry {
	rec := record(id)
	rec.Content = string(make([]byte, 1024))
	e, err := Prepare(rec, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// BenchmarkAzuriteSingleAppend: one client appending one 1 KiB record at a
// time, against the floor of any correct design: one create-only PUT of a
// blob the size of the log batch the writer creates for the append, at the
// next name, on the same shared client. (A commit by manifest CAS needed a
// second, sequential write; that is no longer the floor.) Iterations
// alternate between the two in blocks of ten.
func BenchmarkAzuriteSingleAppend(b *testing.B) {
	store := azureStore(b)
	ctx := context.Background()
	w, err := Open(ctx, store, "bench", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	// A blob the size of what the writer creates for one record.
	e := kib1Entry(b, "sizing")
	lb := format.NewLogBatchBuilder(format.LogEntry{Shard: "floor", Epoch: 1, Position: 1, Writer: "floor", PutID: "floor-1"}, 1100)
	lb.Add(e.ID, 1, e.Data, e.ClientHash)
	l, err := lb.Finish()
	if err != nil {
		b.Fatal(err)
	}
	floor, resident := alternate(b, 50*time.Millisecond, func(i int) time.Duration {
		start := time.Now()
		if _, err := store.Put(ctx, fmt.Sprintf("floor/l/%d", i), l.Data, blob.PutOptions{IfNoneMatch: true, PutID: fmt.Sprint("l", i)}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}, func(i int) time.Duration {
		ent := kib1Entry(b, fmt.Sprint("id-", i))
		start := time.Now()
		if _, err := w.Append(ctx, []Entry{ent}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	})
	b.ReportMetric(float64(p50(floor).Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(p50(resident).Microseconds()), "append-p50-µs")
	b.ReportMetric(float64(p50(resident))/float64(p50(floor)), "append/floor-p50")
}

// BenchmarkAzurite64Appenders: 64 clients on one shard against one client,
// in the same run. Reports the throughput ratio and the blob writes (every
// PUT: generations, manifest CASes, merges) per acknowledged append.
func BenchmarkAzurite64Appenders(b *testing.B) {
	fs := faultstore.New(azureStore(b), 1) // no faults: it counts calls
	ctx := context.Background()
	w, err := Open(ctx, fs, "bench", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	var n atomic.Int64
	appendOne := func() {
		if _, err := w.Append(ctx, []Entry{kib1Entry(b, fmt.Sprint("id-", n.Add(1)))}); err != nil {
			b.Error(err)
		}
	}
	const single, perClient, clients = 200, 20, 64
	var singleRate, multiRate, writesPerAck float64
	for b.Loop() {
		start := time.Now()
		for range single {
			appendOne()
		}
		singleRate = single / time.Since(start).Seconds()

		fs.ResetCounts()
		start = time.Now()
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for range perClient {
					appendOne()
				}
			})
		}
		wg.Wait()
		multiRate = clients * perClient / time.Since(start).Seconds()
		writesPerAck = float64(fs.InnerCalls(faultstore.OpPut)) / (clients * perClient)
	}
	b.ReportMetric(singleRate, "single-appends/s")
	b.ReportMetric(multiRate, "64-appends/s")
	b.ReportMetric(multiRate/singleRate, "64/single")
	b.ReportMetric(writesPerAck, "writes/ack")
}

// BenchmarkAzuriteGet measures a Get by a reader that holds no writer (as
// another instance would) against the read floor: a GET of the manifest
// then a ranged GET of one record, sequential, on the same client. In
// process, without gRPC, so that rolloutbench's target 5 can be split into
// the reader's share and the gRPC hop's.
func BenchmarkAzuriteGet(b *testing.B) {
	store := azureStore(b)
	ctx := context.Background()
	w, err := Open(ctx, store, "bench", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	for i := range 500 {
		id := fmt.Sprint("id-", i)
		if _, err := w.Append(ctx, []Entry{kib1Entry(b, id)}); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	m, _, err := shardlog.ReadManifest(ctx, store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	g := m.GetGenerations()[len(m.GetGenerations())-1]
	genName := format.KeyOf(g).Blob("bench")
	r := NewReader(store, ReaderOptions{})
	for _, id := range ids[:20] { // warm the caches, as a serving reader's are
		if _, err := r.Get(ctx, "bench", id); err != nil {
			b.Fatal(err)
		}
	}
	floor, get := alternate(b, 20*time.Millisecond, func(int) time.Duration {
		start := time.Now()
		if _, _, err := store.Get(ctx, format.ManifestName("bench"), blob.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, _, err := store.Get(ctx, genName, blob.GetOptions{Offset: 0, Length: 1100}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}, func(i int) time.Duration {
		start := time.Now()
		if _, err := r.Get(ctx, "bench", ids[i%len(ids)]); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	})
	b.ReportMetric(float64(p50(floor).Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(p50(get).Microseconds()), "get-p50-µs")
	b.ReportMetric(float64(p50(get))/float64(p50(floor)), "get/floor-p50")
}
