// Package defaults fills the unset numeric fields of an options struct, so
// that each withDefaults reads as one line per field.
package defaults

// Number is the kinds of field Positive fills: counts, byte sizes and
// durations.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 | ~float32 | ~float64
}

// Positive sets *field to def when it is zero or negative. Options treat a
// negative count, size or duration like an unset one, so that it never
// reaches the code that sizes or waits with it.
func Positive[T Number](field *T, def T) {
	if *field <= 0 {
		*field = def
	}
}
