package shard

import (
	"fmt"
	"testing"
	"time"
)

// Benchmarks of a record's bytes on their way from a decoded request to a
// committed batch (issue 32): preparing one 1 KiB record, and encoding a
// commit of n of them.
//
//	go test -run '^$' -bench 'PrepareWithID|EncodeBatch' -benchmem ./internal/shard

// BenchmarkPrepareWithID is what every appended record costs before it
// queues: its stored encoding and its client hash, with the id and
// created_at the server fills.
func BenchmarkPrepareWithID(b *testing.B) {
	rec := record("")
	rec.Content = string(make([]byte, 1024))
	now := time.Unix(1_800_000_000, 123_456_789)
	b.ReportAllocs()
	// CPU time (the collector's included) is steadier than wall time on
	// a shared machine.
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := PrepareWithID(rec, "0190f5a2-7c1e-7b3d-9c4f-123456789abc", now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeBatch is the committer's CPU per commit before its create:
// n appends of one 1 KiB record each, encoded as one log batch.
func BenchmarkEncodeBatch(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("appends=%d", n), func(b *testing.B) {
			c := encodeTestCommitter()
			live := encodeTestBatch(b, n)
			b.SetBytes(int64(n * 1024))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, _, err := c.encodeBatch(live, 7, 100, "w1-1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
