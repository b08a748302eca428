package export

import (
	"io"
	"testing"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/export/synth"
)

// countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

func synthRecords(n int) []*rolloutv1.Record {
	g := synth.New(1, 1024)
	recs := make([]*rolloutv1.Record, n)
	for i := range recs {
		recs[i] = g.Record()
		recs[i].Seq = uint64(i + 1)
	}
	return recs
}

// BenchmarkLibraries writes the same 20,000 synthetic records (about 1 KiB
// of content each, tokens and logprobs filled) to one zstd Parquet file with
// each library, in batches of 256 as Scan delivers them. It reports the
// output size per record beside time and allocations.
//
//	go test -run '^$' -bench Libraries -benchmem -count 3 ./internal/export/
func BenchmarkLibraries(b *testing.B) {
	recs := synthRecords(20000)
	type writer interface {
		write([]*rolloutv1.Record) error
		close() error
	}
	libs := []struct {
		name string
		open func(io.Writer) (writer, error)
	}{
		{"parquet-go", func(w io.Writer) (writer, error) { return newPartWriter(w, "bench/s", Zstd) }},
		{"arrow-go", func(w io.Writer) (writer, error) { return newArrowWriter(w, "bench/s") }},
	}
	for _, lib := range libs {
		b.Run(lib.name, func(b *testing.B) {
			var out int64
			for b.Loop() {
				cw := &countWriter{}
				w, err := lib.open(cw)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < len(recs); i += 256 {
					if err := w.write(recs[i:min(i+256, len(recs))]); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.close(); err != nil {
					b.Fatal(err)
				}
				out = cw.n
			}
			b.ReportMetric(float64(out)/float64(len(recs)), "outB/rec")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/rec")
		})
	}
}
