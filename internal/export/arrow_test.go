package export

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// The Apache Arrow Go Parquet library is the one export did not choose for
// writing: it writes the same schema here for the measurement of the two
// (BenchmarkLibraries), and reads export's parts back in the cross-read
// test.

var relType = arrow.StructOf(
	arrow.Field{Name: "target_id", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "relation", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "weight", Type: arrow.PrimitiveTypes.Float32},
)

var arrowSchema = arrow.NewSchema([]arrow.Field{
	{Name: "shard", Type: arrow.BinaryTypes.String},
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "seq", Type: arrow.PrimitiveTypes.Int64},
	{Name: "rollout_id", Type: arrow.BinaryTypes.String},
	{Name: "problem_id", Type: arrow.BinaryTypes.String},
	{Name: "dataset", Type: arrow.BinaryTypes.String},
	{Name: "sequence_order", Type: arrow.PrimitiveTypes.Int32},
	{Name: "role", Type: arrow.BinaryTypes.String},
	{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	{Name: "content", Type: arrow.BinaryTypes.String},
	{Name: "content_type", Type: arrow.BinaryTypes.String},
	{Name: "input_tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	{Name: "output_tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32)},
	{Name: "output_logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	{Name: "ref_logprobs", Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)},
	{Name: "loss_mask", Type: arrow.BinaryTypes.Binary},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "advantage", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "score", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "policy_version", Type: arrow.BinaryTypes.String},
	{Name: "include_in_training", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "grader_id", Type: arrow.BinaryTypes.String},
	{Name: "relationships", Type: arrow.ListOf(relType)},
	{Name: "metadata", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String)},
	{Name: "binary_payload", Type: arrow.BinaryTypes.Binary},
}, nil)

// arrowWriter writes records with arrow-go, a record batch per call.
type arrowWriter struct {
	fw    *pqarrow.FileWriter
	b     *array.RecordBuilder
	shard string
}

func newArrowWriter(w io.Writer, shard string) (*arrowWriter, error) {
	// The same encodings as export's parts: delta for token ids, byte
	// stream split for logprobs, no dictionaries, zstd's fastest level.
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithCompressionLevel(1), parquet.WithMaxRowGroupLength(8192),
		parquet.WithDictionaryDefault(false),
		parquet.WithEncodingFor("input_tokens.list.element", parquet.Encodings.DeltaBinaryPacked),
		parquet.WithEncodingFor("output_tokens.list.element", parquet.Encodings.DeltaBinaryPacked),
		parquet.WithEncodingFor("output_logprobs.list.element", parquet.Encodings.ByteStreamSplit),
		parquet.WithEncodingFor("ref_logprobs.list.element", parquet.Encodings.ByteStreamSplit))
	fw, err := pqarrow.NewFileWriter(arrowSchema, w, props, pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, err
	}
	return &arrowWriter{fw: fw, b: array.NewRecordBuilder(memory.DefaultAllocator, arrowSchema), shard: shard}, nil
}

func optF32(b *array.Float32Builder, v *float32) {
	if v == nil {
		b.AppendNull()
	} else {
		b.Append(*v)
	}
}

func (a *arrowWriter) write(recs []*rolloutv1.Record) error {
	f := a.b.Fields()
	for _, r := range recs {
		f[0].(*array.StringBuilder).Append(a.shard)
		f[1].(*array.StringBuilder).Append(r.GetId())
		f[2].(*array.Int64Builder).Append(int64(r.GetSeq()))
		f[3].(*array.StringBuilder).Append(r.GetRolloutId())
		f[4].(*array.StringBuilder).Append(r.GetProblemId())
		f[5].(*array.StringBuilder).Append(r.GetDataset())
		f[6].(*array.Int32Builder).Append(r.GetSequenceOrder())
		f[7].(*array.StringBuilder).Append(r.GetRole().String())
		if ts := r.GetCreatedAt(); ts != nil {
			f[8].(*array.TimestampBuilder).Append(arrow.Timestamp(ts.AsTime().UnixMicro()))
		} else {
			f[8].AppendNull()
		}
		f[9].(*array.StringBuilder).Append(r.GetContent())
		f[10].(*array.StringBuilder).Append(r.GetContentType())
		for i, v := range [][]int32{r.GetInputTokens(), r.GetOutputTokens()} {
			lb := f[11+i].(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Int32Builder).AppendValues(v, nil)
		}
		for i, v := range [][]float32{r.GetOutputLogprobs(), r.GetRefLogprobs()} {
			lb := f[13+i].(*array.ListBuilder)
			lb.Append(true)
			lb.ValueBuilder().(*array.Float32Builder).AppendValues(v, nil)
		}
		f[15].(*array.BinaryBuilder).Append(r.GetLossMask())
		optF32(f[16].(*array.Float32Builder), r.Reward)
		optF32(f[17].(*array.Float32Builder), r.Advantage)
		optF32(f[18].(*array.Float32Builder), r.Score)
		f[19].(*array.StringBuilder).Append(r.GetPolicyVersion())
		f[20].(*array.BooleanBuilder).Append(r.GetIncludeInTraining())
		f[21].(*array.StringBuilder).Append(r.GetGraderId())
		lb := f[22].(*array.ListBuilder)
		lb.Append(true)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		for _, rel := range r.GetRelationships() {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(rel.GetTargetId())
			sb.FieldBuilder(1).(*array.StringBuilder).Append(rel.GetRelation())
			sb.FieldBuilder(2).(*array.Float32Builder).Append(rel.GetWeight())
		}
		mb := f[23].(*array.MapBuilder)
		mb.Append(true)
		for k, v := range r.GetMetadata() {
			mb.KeyBuilder().(*array.StringBuilder).Append(k)
			mb.ItemBuilder().(*array.StringBuilder).Append(v)
		}
		f[24].(*array.BinaryBuilder).Append(r.GetBinaryPayload())
	}
	rec := a.b.NewRecordBatch()
	defer rec.Release()
	return a.fw.WriteBuffered(rec)
}

func (a *arrowWriter) close() error {
	a.b.Release()
	return a.fw.Close()
}

// arrowRow is a record read back by arrow-go, as plain Go values.
type arrowRow struct {
	Shard, ID, Role, Content, PolicyVersion string
	Seq                                     int64
	CreatedAt                               *time.Time
	InputTokens, OutputTokens               []int32
	OutputLogprobs, RefLogprobs             []float32
	LossMask, BinaryPayload                 []byte
	Reward, Advantage, Score                *float32
	IncludeInTraining                       bool
	Relationships                           []Relationship
	Metadata                                map[string]string
}

// readArrow reads a part with arrow-go and returns its rows.
func readArrow(r parquet.ReaderAtSeeker) ([]arrowRow, error) {
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return nil, err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	col := map[string]*arrow.Chunked{}
	for i := range int(tbl.NumCols()) {
		col[tbl.Schema().Field(i).Name] = tbl.Column(i).Data()
	}
	for _, f := range arrowSchema.Fields() {
		got, ok := col[f.Name]
		if !ok {
			return nil, fmt.Errorf("column %s missing", f.Name)
		}
		if !sameType(got.DataType(), f.Type) {
			return nil, fmt.Errorf("column %s is %s, want %s", f.Name, got.DataType(), f.Type)
		}
	}
	rows := make([]arrowRow, tbl.NumRows())
	each := func(name string, set func(i int, a arrow.Array, j int)) {
		i := 0
		for _, c := range col[name].Chunks() {
			for j := range c.Len() {
				set(i, c, j)
				i++
			}
		}
	}
	str := func(name string, dst func(*arrowRow) *string) {
		each(name, func(i int, a arrow.Array, j int) { *dst(&rows[i]) = a.(*array.String).Value(j) })
	}
	str("shard", func(r *arrowRow) *string { return &r.Shard })
	str("id", func(r *arrowRow) *string { return &r.ID })
	str("role", func(r *arrowRow) *string { return &r.Role })
	str("content", func(r *arrowRow) *string { return &r.Content })
	str("policy_version", func(r *arrowRow) *string { return &r.PolicyVersion })
	each("seq", func(i int, a arrow.Array, j int) { rows[i].Seq = a.(*array.Int64).Value(j) })
	each("include_in_training", func(i int, a arrow.Array, j int) { rows[i].IncludeInTraining = a.(*array.Boolean).Value(j) })
	each("created_at", func(i int, a arrow.Array, j int) {
		if a.IsValid(j) {
			t := time.UnixMicro(int64(a.(*array.Timestamp).Value(j))).UTC()
			rows[i].CreatedAt = &t
		}
	})
	bin := func(name string, dst func(*arrowRow) *[]byte) {
		each(name, func(i int, a arrow.Array, j int) {
			if v := a.(*array.Binary).Value(j); len(v) > 0 {
				*dst(&rows[i]) = append([]byte(nil), v...)
			}
		})
	}
	bin("loss_mask", func(r *arrowRow) *[]byte { return &r.LossMask })
	bin("binary_payload", func(r *arrowRow) *[]byte { return &r.BinaryPayload })
	opt := func(name string, dst func(*arrowRow) **float32) {
		each(name, func(i int, a arrow.Array, j int) {
			if a.IsValid(j) {
				v := a.(*array.Float32).Value(j)
				*dst(&rows[i]) = &v
			}
		})
	}
	opt("reward", func(r *arrowRow) **float32 { return &r.Reward })
	opt("advantage", func(r *arrowRow) **float32 { return &r.Advantage })
	opt("score", func(r *arrowRow) **float32 { return &r.Score })
	i32s := func(name string, dst func(*arrowRow) *[]int32) {
		each(name, func(i int, a arrow.Array, j int) {
			l := a.(*array.List)
			s, e := l.ValueOffsets(j)
			vals := l.ListValues().(*array.Int32).Int32Values()[s:e]
			if len(vals) > 0 {
				*dst(&rows[i]) = append([]int32(nil), vals...)
			}
		})
	}
	i32s("input_tokens", func(r *arrowRow) *[]int32 { return &r.InputTokens })
	i32s("output_tokens", func(r *arrowRow) *[]int32 { return &r.OutputTokens })
	f32s := func(name string, dst func(*arrowRow) *[]float32) {
		each(name, func(i int, a arrow.Array, j int) {
			l := a.(*array.List)
			s, e := l.ValueOffsets(j)
			vals := l.ListValues().(*array.Float32).Float32Values()[s:e]
			if len(vals) > 0 {
				*dst(&rows[i]) = append([]float32(nil), vals...)
			}
		})
	}
	f32s("output_logprobs", func(r *arrowRow) *[]float32 { return &r.OutputLogprobs })
	f32s("ref_logprobs", func(r *arrowRow) *[]float32 { return &r.RefLogprobs })
	each("relationships", func(i int, a arrow.Array, j int) {
		l := a.(*array.List)
		s, e := l.ValueOffsets(j)
		st := l.ListValues().(*array.Struct)
		for k := int(s); k < int(e); k++ {
			rows[i].Relationships = append(rows[i].Relationships, Relationship{
				TargetID: st.Field(0).(*array.String).Value(k),
				Relation: st.Field(1).(*array.String).Value(k),
				Weight:   st.Field(2).(*array.Float32).Value(k),
			})
		}
	})
	each("metadata", func(i int, a arrow.Array, j int) {
		m := a.(*array.Map)
		s, e := m.ValueOffsets(j)
		keys, items := m.Keys().(*array.String), m.Items().(*array.String)
		for k := int(s); k < int(e); k++ {
			if rows[i].Metadata == nil {
				rows[i].Metadata = map[string]string{}
			}
			rows[i].Metadata[keys.Value(k)] = items.Value(k)
		}
	})
	return rows, nil
}

// sameType compares arrow types, ignoring the names and nullability of
// list elements, which each library spells its own way.
func sameType(a, b arrow.DataType) bool {
	switch a := a.(type) {
	case *arrow.ListType:
		b, ok := b.(*arrow.ListType)
		return ok && sameType(a.Elem(), b.Elem())
	case *arrow.MapType:
		b, ok := b.(*arrow.MapType)
		return ok && sameType(a.KeyType(), b.KeyType()) && sameType(a.ItemType(), b.ItemType())
	case *arrow.StructType:
		b, ok := b.(*arrow.StructType)
		if !ok || a.NumFields() != b.NumFields() {
			return false
		}
		for i := range a.NumFields() {
			if a.Field(i).Name != b.Field(i).Name || !sameType(a.Field(i).Type, b.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return arrow.TypeEqual(a, b)
}
