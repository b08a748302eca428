package shard

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// BenchmarkAzuriteScan100k scans a 100,000-record shard and compares its
// throughput with plain ranged GETs of the same generations' bytes, in
// 4 MiB reads, in the same run.
//
//	go test -run '^$' -bench AzuriteScan100k -benchtime 3x ./internal/shard
func BenchmarkAzuriteScan100k(b *testing.B) {
	const total, perAppend = 100_000, 100
	store := azureStore(b)
	ctx := context.Background()
	w, err := Open(ctx, store, "scan", Options{Logger: zap.NewNop()})
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
	reader := NewReader(store, ReaderOptions{Cache: NewIndexCache(64 << 20)})
	m, err := reader.Manifest(ctx, "scan")
	if err != nil {
		b.Fatal(err)
	}
	var rawBytes int64
	raw := func() time.Duration {
		start := time.Now()
		rawBytes = 0
		for _, g := range m.GetGenerations() {
			name := format.KeyOf(g).Blob("scan")
			end := int64(g.GetFooterOffset() - uint64(g.GetFilterLength()))
			for off := int64(8); off < end; off += 4 << 20 {
				data, _, err := store.Get(ctx, name, blob.GetOptions{Offset: off, Length: min(4<<20, end-off)})
				if err != nil {
					b.Fatal(err)
				}
				rawBytes += int64(len(data))
			}
		}
		return time.Since(start)
	}
	scan := func(raw bool) time.Duration {
		start := time.Now()
		n := 0
		err := reader.Scan(ctx, "scan", ScanOptions{Raw: raw}, func(bt Batch) error {
			n += len(bt.Records) + len(bt.Raw)
			return nil
		})
		if err != nil || n != total {
			b.Fatalf("scan: %d records, %v", n, err)
		}
		return time.Since(start)
	}
	scan(false) // warm the footer indexes, as a long-lived reader would have them
	var raws, scans, passes []time.Duration
	for b.Loop() {
		raws = append(raws, raw())
		scans = append(scans, scan(false))
		passes = append(passes, scan(true))
	}
	rawT, scanT, passT := slices.Min(raws), slices.Min(scans), slices.Min(passes)
	b.ReportMetric(float64(len(m.GetGenerations())), "generations")
	b.ReportMetric(float64(rawBytes)/rawT.Seconds()/(1<<20), "raw-MiB/s")
	// Decoded: what a filtered or projected Scan RPC costs.
	b.ReportMetric(rawT.Seconds()/scanT.Seconds(), "decoded/raw-throughput")
	// Passthrough: what an unfiltered Scan RPC costs (records are forwarded
	// as stored, checksum-verified, never decoded).
	b.ReportMetric(rawT.Seconds()/passT.Seconds(), "passthrough/raw-throughput")
}

// BenchmarkFollowLatency measures commit-to-delivery latency of a following
// scan on the same instance (woken by the Notifier) and on another instance
// (manifest polling, 50 ms floor), on Azurite.
//
//	go test -run '^$' -bench FollowLatency -benchtime 200x ./internal/shard
func BenchmarkFollowLatency(b *testing.B) {
	for _, local := range []bool{true, false} {
		name := "other-instance"
		if local {
			name = "same-instance"
		}
		b.Run(name, func(b *testing.B) {
			store := azureStore(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := NewNotifier()
			w, err := Open(ctx, store, "follow", Options{Logger: zap.NewNop(), Notifier: n})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Abort()
			sopts := ScanOptions{Follow: true, PollMax: 50 * time.Millisecond}
			if local {
				sopts.Notifier = n
			}
			committed := make(chan time.Time, 1)
			delivered := make(chan time.Duration, 1)
			go func() {
				_ = NewReader(store, ReaderOptions{}).Scan(ctx, "follow", sopts, func(bt Batch) error {
					if len(bt.Records) > 0 {
						delivered <- time.Since(<-committed)
					}
					return nil
				})
			}()
			var lat []time.Duration
			i := 0
			for b.Loop() {
				i++
				if _, err := w.Append(ctx, []Entry{smallEntry(b, fmt.Sprint("f-", i))}); err != nil {
					b.Fatal(err)
				}
				committed <- time.Now()
				lat = append(lat, <-delivered)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
