package export

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// typeName spells a column's type as docs/export.md does.
func typeName(n parquet.Node) string {
	var lt any
	if l := n.Type().LogicalType(); l != nil {
		lt = l.Value
	}
	ts, isTS := lt.(*format.TimestampType)
	switch _, isStr := lt.(*format.StringType); {
	case isType[*format.ListType](lt):
		return "LIST<" + typeName(n.Fields()[0].Fields()[0]) + ">"
	case isType[*format.MapType](lt):
		kv := n.Fields()[0].Fields()
		return "MAP<" + typeName(kv[0]) + ", " + typeName(kv[1]) + ">"
	case !n.Leaf():
		var fs []string
		for _, f := range n.Fields() {
			fs = append(fs, f.Name()+" "+typeName(f))
		}
		return "STRUCT<" + strings.Join(fs, ", ") + ">"
	case isStr:
		return "STRING"
	case isTS && ts.IsAdjustedToUTC && isType[*format.MicroSeconds](ts.Unit.Value):
		return "TIMESTAMP(MICROS, UTC)"
	case isTS:
		return "TIMESTAMP(" + ts.String() + ")"
	case n.Type().Kind() == parquet.ByteArray:
		return "BINARY"
	}
	return strings.ToUpper(n.Type().Kind().String())
}

func isType[T any](v any) bool {
	_, ok := v.(T)
	return ok
}

// TestSchemaDocumented keeps the schema table of docs/export.md, one row
// per column, in step with the columns export writes: names, order, types
// and nullability.
func TestSchemaDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/export.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([^`]+)` \\| (yes|no) \\|")
	var got []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		got = append(got, m[1]+" "+m[2]+" "+m[3])
	}
	var want []string
	for _, f := range parquet.SchemaOf(Row{}).Fields() {
		null := "no"
		if f.Optional() {
			null = "yes"
		}
		want = append(want, f.Name()+" "+typeName(f)+" "+null)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("docs/export.md's schema table:\n%s\n\nthe columns export writes:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
