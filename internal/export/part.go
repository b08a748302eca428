package export

import (
	"fmt"
	"io"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/snappy"
	"github.com/parquet-go/parquet-go/compress/uncompressed"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Compression names a part's column compression.
type Compression string

// The compressions --compression takes.
const (
	Zstd   Compression = "zstd"
	Snappy Compression = "snappy"
	None   Compression = "none"
)

func (c Compression) codec() (compress.Codec, error) {
	switch c {
	case Zstd, "":
		return sharedZstd, nil
	case Snappy:
		return &snappy.Codec{}, nil
	case None:
		return &uncompressed.Codec{}, nil
	}
	return nil, fmt.Errorf("compression %q: want zstd, snappy or none", string(c))
}

// rowGroupBytes bounds the records, by stored size, buffered in one row
// group: the writer holds a row group's values and pages in memory until
// it ends it, so this, not the shard's or the part's size, bounds export's
// memory.
const rowGroupBytes = 2 << 20

// pageBufferBytes is the writer's page buffer, per column. It is larger
// than any column of a row group of typical records, so that the writer
// encodes no page while it takes rows: a row group's columns are encoded
// and compressed when it ends, on several goroutines at once (see
// flushColumns), instead of one page at a time on the writer's goroutine.
// parquet-go allocates this much for each flat column, which costs peak
// RSS; a column larger than this (a row group of huge records) is encoded
// in pages of this size as rows come, as before.
const pageBufferBytes = 2 << 20

// unboundedColumns get no page bounds (min and max), neither in the column
// index nor in the page headers: bounds of token ids, logprobs and text let
// a reader skip no page worth skipping, and cost the writer time. Leaving
// them out of the page headers too took BenchmarkPartWriter's zstd CPU
// from 18.9 to 17.5 us a record (-7%, medians of 3) and the output from
// 2,271 to 2,252 bytes a record.
var unboundedColumns = [][]string{
	{"input_tokens", "list", "element"},
	{"output_tokens", "list", "element"},
	{"output_logprobs", "list", "element"},
	{"ref_logprobs", "list", "element"},
	{"content"},
	{"loss_mask"},
	{"binary_payload"},
}

// partWriter writes one Parquet part of one shard to w.
type partWriter struct {
	w        *parquet.GenericWriter[Row]
	shard    string
	rows     []Row
	buffered int // stored bytes of records in the current row group
	n        int // rows written
	first    uint64
	last     uint64
}

func newPartWriter(w io.Writer, shard string, c Compression) (*partWriter, error) {
	codec, err := c.codec()
	if err != nil {
		return nil, err
	}
	opts := []parquet.WriterOption{
		parquet.Compression(codec),
		parquet.CreatedBy("rolloutd export", "", ""),
		parquet.PageBufferSize(pageBufferBytes),
	}
	for _, col := range unboundedColumns {
		opts = append(opts, parquet.SkipPageBounds(col...), parquet.SkipPageStatistics(col...))
	}
	pw := parquet.NewGenericWriter[Row](w, opts...)
	pw.SetKeyValueMetadata("rolloutd.shard", shard)
	return &partWriter{w: pw, shard: shard}, nil
}

// write adds records, in seq order, to the part.
func (p *partWriter) write(recs []*rolloutv1.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if cap(p.rows) < len(recs) {
		p.rows = make([]Row, len(recs))
	}
	rows := p.rows[:len(recs)]
	for i, rec := range recs {
		rows[i].fill(p.shard, rec)
		p.buffered += int(approxSize(rec))
	}
	if _, err := p.w.Write(rows); err != nil {
		return fmt.Errorf("export: write parquet rows: %w", err)
	}
	for i := range rows { // the rows alias the records: let them go
		rows[i] = Row{Relationships: rows[i].Relationships[:0]}
	}
	if p.n == 0 {
		p.first = recs[0].GetSeq()
	}
	p.n += len(recs)
	p.last = recs[len(recs)-1].GetSeq()
	if p.buffered >= rowGroupBytes {
		p.buffered = 0
		if err := p.flushColumns(); err != nil {
			return err
		}
		if err := p.w.Flush(); err != nil {
			return fmt.Errorf("export: end parquet row group: %w", err)
		}
	}
	return nil
}

// close writes the footer.
func (p *partWriter) close() error {
	p.w.SetKeyValueMetadata("rolloutd.first_seq", fmt.Sprint(p.first))
	p.w.SetKeyValueMetadata("rolloutd.last_seq", fmt.Sprint(p.last))
	if err := p.flushColumns(); err != nil {
		return err
	}
	if err := p.w.Close(); err != nil {
		return fmt.Errorf("export: finish parquet part: %w", err)
	}
	return nil
}

// flushColumns encodes and compresses the current row group's buffered
// columns into pages, on as many goroutines as there are CPUs: export's
// wall time is the writer's, which the scan beside it leaves a core's
// share of CPU for. Each column's writer is its own; those of different
// columns share only parquet-go's buffer pools and the codec, all safe for
// concurrent use (sharedZstd's EncodeAll is). Writing the row group out
// stays on the caller's goroutine (GenericWriter.Flush or Close).
func (p *partWriter) flushColumns() error {
	cols := p.w.ColumnWriters()
	next := make(chan *parquet.ColumnWriter, len(cols))
	for _, c := range cols {
		next <- c
	}
	close(next)
	var g errgroup.Group
	for range min(runtime.GOMAXPROCS(0), len(cols)) {
		g.Go(func() error {
			for c := range next {
				if err := c.Flush(); err != nil {
					return fmt.Errorf("export: encode parquet column: %w", err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}
