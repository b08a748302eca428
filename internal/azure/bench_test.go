package azure

import (
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// The benchmarks measure the Store against the package's Azurite: the floor
// of an acknowledged append is one create-only generation put plus one
// manifest CAS (docs/performance.md, "floor"). Run them with
//
//	go test -run='^$' -bench=. -benchtime=2000x ./internal/azure

func BenchmarkPutCreateOnly1KiB(b *testing.B) {
	s := newTestStore(b, testConfig("bench"))
	data := payload(1024)
	prefix := uniqueContainer("create")
	i := 0
	benchLatency(b, func() error {
		i++
		_, err := s.Put(b.Context(), fmt.Sprintf("%s/gen-%d", prefix, i), data,
			blob.PutOptions{IfNoneMatch: true, PutID: fmt.Sprintf("p%d", i)})
		return err
	})
}

func BenchmarkPutCAS1KiB(b *testing.B) {
	s := newTestStore(b, testConfig("bench"))
	data := payload(1024)
	name := uniqueContainer("cas") + "/manifest"
	cur, err := s.Put(b.Context(), name, data, blob.PutOptions{IfNoneMatch: true})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	benchLatency(b, func() error {
		i++
		a, err := s.Put(b.Context(), name, data, blob.PutOptions{IfMatch: cur.ETag, PutID: fmt.Sprintf("c%d", i)})
		cur = a
		return err
	})
}

// BenchmarkPutCreateOnly1KiBParallel shows Azurite's ceiling in puts/s
// with 32 concurrent writers on one Store.
func BenchmarkPutCreateOnly1KiBParallel(b *testing.B) {
	s := newTestStore(b, testConfig("bench"))
	data := payload(1024)
	prefix := uniqueContainer("par")
	var (
		n   atomic.Int64
		mu  sync.Mutex
		lat = make([]time.Duration, 0, b.N)
	)
	b.SetParallelism(16) // 32 goroutines on 2 cores
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			i := n.Add(1)
			t0 := time.Now()
			if _, err := s.Put(b.Context(), fmt.Sprintf("%s/gen-%d", prefix, i), data, blob.PutOptions{IfNoneMatch: true}); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	reportPercentiles(b, lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "puts/s")
}

// benchLatency runs op b.N times and reports the p50 and p99 latency.
func benchLatency(b *testing.B, op func() error) {
	b.Helper()
	// One unmeasured op opens the connection.
	if err := op(); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

func payload(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
