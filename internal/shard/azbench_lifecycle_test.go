package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// The shard lifecycle's targets, on Azurite, as ratios within one run:
//
//	go test -run '^$' -bench 'AzuriteBatchGet|AzuriteDescribe|AzuriteListShards' -benchtime 20x ./internal/shard

// BenchmarkAzuriteBatchGet100 reads 100 ids spread over a 100,000-record
// shard with one BatchGet, and the same ids with 100 sequential Gets, warm
// caches both (a long-lived reader's). Target: batch/gets p50 <= 0.6.
func BenchmarkAzuriteBatchGet100(b *testing.B) {
	const total, perAppend = 100_000, 1000
	store := azureStore(b)
	ctx := context.Background()
	w, err := Open(ctx, store, "bg", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < total; i += perAppend {
		batch := make([]Entry, perAppend)
		for j := range batch {
			batch[j] = smallEntry(b, fmt.Sprint("id-", i+j))
		}
		if _, err := w.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	r := NewReader(store, ReaderOptions{Cache: NewIndexCache(256 << 20)})
	rnd := rand.New(rand.NewPCG(1, 2))
	pick := func() []string {
		ids := make([]string, 100)
		for i := range ids {
			ids[i] = fmt.Sprint("id-", rnd.IntN(total))
		}
		return ids
	}
	// Warm the filters and indexes of every generation.
	if _, err := r.BatchGet(ctx, "bg", pick(), BatchGetOptions{}); err != nil {
		b.Fatal(err)
	}
	m, _ := r.Manifest(ctx, "bg")
	var batch, gets []time.Duration
	for b.Loop() {
		ids := pick()
		start := time.Now()
		res, err := r.BatchGet(ctx, "bg", ids, BatchGetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, time.Since(start))
		for i, x := range res {
			if x.Record.GetId() != ids[i] {
				b.Fatalf("result %d: %v", i, x)
			}
		}
		start = time.Now()
		for _, id := range ids {
			if _, err := r.Get(ctx, "bg", id); err != nil {
				b.Fatal(err)
			}
		}
		gets = append(gets, time.Since(start))
	}
	b.ReportMetric(float64(len(m.GetGenerations())), "generations")
	b.ReportMetric(float64(p50(batch).Microseconds()), "batchget-p50-µs")
	b.ReportMetric(float64(p50(gets).Microseconds()), "100gets-p50-µs")
	b.ReportMetric(p50(batch).Seconds()/p50(gets).Seconds(), "batch/gets")
}

// BenchmarkAzuriteDescribe compares Describe (exact: the current manifest,
// by conditional GET) with a plain GET of the manifest blob. Target:
// describe/manifest-get p50 <= 2.
func BenchmarkAzuriteDescribe(b *testing.B) {
	store := azureStore(b)
	ctx := context.Background()
	w, err := Open(ctx, store, "d", Options{Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		if _, err := w.Append(ctx, []Entry{smallEntry(b, fmt.Sprint("d-", i))}); err != nil {
			b.Fatal(err)
		}
	}
	defer w.Abort()
	r := NewReader(store, ReaderOptions{})
	var desc, get []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := r.Describe(ctx, "d"); err != nil {
			b.Fatal(err)
		}
		desc = append(desc, time.Since(start))
		start = time.Now()
		if _, _, err := store.Get(ctx, format.ManifestName("d"), blob.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		get = append(get, time.Since(start))
	}
	b.ReportMetric(float64(p50(desc).Microseconds()), "describe-p50-µs")
	b.ReportMetric(float64(p50(get).Microseconds()), "manifest-get-p50-µs")
	b.ReportMetric(p50(desc).Seconds()/p50(get).Seconds(), "describe/manifest-get")
}

// shardBlobs writes n shards' manifests under prefix, and two generation
// blobs for every tenth, in parallel. Listing reads no content.
func shardBlobs(b *testing.B, store blob.Store, prefix string, n int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		s := fmt.Sprintf("%s/actor-%05d", prefix, i)
		names := []string{format.ManifestName(s)}
		if i%10 == 0 {
			names = append(names, format.GenerationName(s, 1, 1), format.GenerationName(s, 1, 2))
		}
		for _, name := range names {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if _, err := store.Put(context.Background(), name, []byte("m"), blob.PutOptions{}); err != nil {
					b.Error(err)
				}
			}()
		}
	}
	wg.Wait()
}

func listAll(b *testing.B, store blob.Store, prefix string, page int) int {
	n := 0
	for tok := ""; ; {
		p, err := ListShards(context.Background(), store, prefix, tok, page)
		if err != nil {
			b.Fatal(err)
		}
		n += len(p.Shards)
		if tok = p.Next; tok == "" {
			return n
		}
	}
}

// BenchmarkAzuriteListShards lists 1,000 shards 100 a page, summaries off,
// beside a flat List through internal/blob of every blob under the prefix,
// keeping the _manifest names. Target: list-shards/list-manifests <= 1.5.
func BenchmarkAzuriteListShards(b *testing.B) {
	const n = 1000
	store := azureStore(b)
	shardBlobs(b, store, "exp", n)
	ctx := context.Background()
	var shards, flat []time.Duration
	for b.Loop() {
		start := time.Now()
		if got := listAll(b, store, "exp", 100); got != n {
			b.Fatalf("listed %d shards", got)
		}
		shards = append(shards, time.Since(start))
		start = time.Now()
		manifests := 0
		for tok := ""; ; {
			p, err := store.List(ctx, blob.ListOptions{Prefix: format.ShardsRoot + "exp/", Token: tok})
			if err != nil {
				b.Fatal(err)
			}
			for _, it := range p.Items {
				if strings.HasSuffix(it.Name, "/_manifest") {
					manifests++
				}
			}
			if tok = p.Next; tok == "" {
				break
			}
		}
		if manifests != n {
			b.Fatalf("%d manifests", manifests)
		}
		flat = append(flat, time.Since(start))
	}
	b.ReportMetric(float64(p50(shards).Microseconds()), "list-shards-p50-µs")
	b.ReportMetric(float64(p50(flat).Microseconds()), "list-manifests-p50-µs")
	b.ReportMetric(p50(shards).Seconds()/p50(flat).Seconds(), "list-shards/list-manifests")
}

// BenchmarkAzuriteListShards10k measures listing 10,000 shards, 1,000 a
// page (the maximum) and 100 a page (the default).
func BenchmarkAzuriteListShards10k(b *testing.B) {
	const n = 10_000
	store := azureStore(b)
	start := time.Now()
	shardBlobs(b, store, "big", n)
	b.Logf("wrote %d shards' blobs in %v", n, time.Since(start))
	var by1000, by100 []time.Duration
	for b.Loop() {
		start := time.Now()
		if got := listAll(b, store, "big", 1000); got != n {
			b.Fatalf("listed %d shards", got)
		}
		by1000 = append(by1000, time.Since(start))
		start = time.Now()
		if got := listAll(b, store, "big", 100); got != n {
			b.Fatalf("listed %d shards", got)
		}
		by100 = append(by100, time.Since(start))
	}
	b.ReportMetric(float64(p50(by1000).Milliseconds()), "page1000-ms")
	b.ReportMetric(float64(p50(by100).Milliseconds()), "page100-ms")
}
