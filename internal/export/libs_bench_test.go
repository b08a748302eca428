package export

import (
	"io"
	"syscall"
	"testing"
	"time"

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

// BenchmarkPartWriter writes 20,000 synthetic records to one part with
// each compression, in batches of 256 as Scan delivers them. Beside the
// wall time a record (ns/rec) it reports the process's CPU time a record
// (cpu-ns/rec, user and system, all goroutines): on a shared machine the
// CPU time is the steadier figure, and export's wall time on two cores
// cannot fall below half the CPU time of the scan and the writer together.
//
//	go test -run '^$' -bench PartWriter -count 3 ./internal/export/
func BenchmarkPartWriter(b *testing.B) {
	recs := synthRecords(20000)
	for _, c := range []Compression{Zstd, Snappy, None} {
		b.Run(string(c), func(b *testing.B) {
			var out int64
			cpu0 := cpuTime()
			for b.Loop() {
				cw := &countWriter{}
				w, err := newPartWriter(cw, "bench/s", c)
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
			cpu := cpuTime() - cpu0
			b.ReportMetric(float64(out)/float64(len(recs)), "outB/rec")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/rec")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(len(recs)), "cpu-ns/rec")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
