package format

import (
	"fmt"
	"testing"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Benchmarks of the stored formats, the CPU side of every commit (build a
// generation, encode the manifest), every claim and Get (decode the
// manifest), every cold id lookup (decode a filter, a footer) and every
// record read (verify it).
//
//	go test -run '^$' -bench . -benchmem ./internal/shard/format

// benchManifest is a manifest as a busy shard carries it: gens live
// generations, the default 64 epoch records, and a retired batch.
func benchManifest(gens int) *storagepb.Manifest {
	m := &storagepb.Manifest{Epoch: 70, Owner: "0123456789abcdef", NextGeneration: uint64(gens + 1), NextSeq: 1,
		CommitId: "0123456789abcdef-12345", UpdatedUnixNanos: 1_800_000_000_000_000_000}
	for i := range gens {
		first := m.NextSeq
		m.NextSeq += 64
		m.Generations = append(m.Generations, &storagepb.Generation{
			Number: uint64(i + 1), Epoch: 70, FirstSeq: first, LastSeq: m.NextSeq - 1, Records: 64,
			Bytes: 70_000, FooterOffset: 66_000, FooterLength: 3_000, CreatedUnixNanos: 1_800_000_000_000_000_000,
			FilterLength: 100, FilterCrc32C: 7,
		})
	}
	for e := range 64 {
		m.Epochs = append(m.Epochs, &storagepb.EpochRecord{Epoch: uint64(e + 7), LastGeneration: uint64(e)})
	}
	m.RetiredBatches = []*storagepb.RetiredBatch{{RetiredUnixNanos: 1, Epochs: []uint64{70, 70, 70, 70}, Numbers: []uint64{1, 2, 3, 4}}}
	m.RecordCount = m.NextSeq - 1
	return m
}

func BenchmarkEncodeManifest(b *testing.B) {
	for _, gens := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("generations=%d", gens), func(b *testing.B) {
			m := benchManifest(gens)
			b.ReportAllocs()
			var n int
			for b.Loop() {
				data, err := EncodeManifest(m)
				if err != nil {
					b.Fatal(err)
				}
				n = len(data)
			}
			b.SetBytes(int64(n))
		})
	}
}

func BenchmarkDecodeManifest(b *testing.B) {
	for _, gens := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("generations=%d", gens), func(b *testing.B) {
			data, err := EncodeManifest(benchManifest(gens))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeManifest(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchRecords are n encoded records of size bytes each, with their ids.
func benchRecords(n, size int) ([]string, [][]byte) {
	ids := make([]string, n)
	recs := make([][]byte, n)
	for i := range n {
		ids[i] = fmt.Sprintf("rb-run-%d-%d", i%64, i)
		recs[i] = make([]byte, size)
		recs[i][0] = byte(i)
	}
	return ids, recs
}

func buildGeneration(tb testing.TB, ids []string, recs [][]byte) Layout {
	size := 0
	for _, r := range recs {
		size += len(r)
	}
	gb := NewGenerationBuilder("exp-42/actor-7", 3, 9, size)
	for i := range recs {
		gb.Add(ids[i], uint64(i+1), recs[i], uint64(i))
	}
	l, err := gb.Finish()
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// BenchmarkBuildGeneration is what a commit encodes: one group commit of
// n 1 KiB records (footer index, id filter, checksums).
func BenchmarkBuildGeneration(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			ids, recs := benchRecords(n, 1024)
			b.SetBytes(int64(n * 1024))
			b.ReportAllocs()
			for b.Loop() {
				buildGeneration(b, ids, recs)
			}
		})
	}
}

// BenchmarkDecodeGeneration verifies and parses a whole blob, as a merge
// reads its sources.
func BenchmarkDecodeGeneration(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			ids, recs := benchRecords(n, 1024)
			l := buildGeneration(b, ids, recs)
			b.SetBytes(int64(len(l.Data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeGeneration(l.Data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeFooter parses the index a cold Get or id lookup reads with
// one ranged GET.
func BenchmarkDecodeFooter(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			ids, recs := benchRecords(n, 1024)
			l := buildGeneration(b, ids, recs)
			tail := l.Data[l.FooterOffset:]
			b.SetBytes(int64(len(tail)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeFooter(tail, l.FooterOffset); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeFilter parses a generation's id filter, which an append
// reads once per generation it has not cached.
func BenchmarkDecodeFilter(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			ids, recs := benchRecords(n, 16)
			l := buildGeneration(b, ids, recs)
			raw := l.Data[l.FilterOffset():l.FooterOffset]
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeFilter(raw, l.FilterCRC); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecord verifies one 1 KiB record read by a ranged GET: the
// CPU of every Get after its two reads.
func BenchmarkRecord(b *testing.B) {
	ids, recs := benchRecords(64, 1024)
	l := buildGeneration(b, ids, recs)
	e := l.Footer.GetEntries()[17]
	raw := l.Data[e.GetOffset() : e.GetOffset()+uint64(e.GetLength())]
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Record(raw, e); err != nil {
			b.Fatal(err)
		}
	}
}
