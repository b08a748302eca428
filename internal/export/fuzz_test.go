package export

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsePart: part names come from a listing of DEST, which anyone may
// write to; parsePart must never panic, and must accept exactly what
// PartName writes.
func FuzzParsePart(f *testing.F) {
	for _, s := range []string{"shard=a/part-1-10.parquet", "part-0-1.parquet", "part-5-4.parquet", "part-1-2-3.parquet", "part--.parquet", ".tmp-part-123"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, ok := parsePart(name)
		if !ok {
			return
		}
		if p.first == 0 || p.first > p.last {
			t.Fatalf("%q parsed to the range %d-%d", name, p.first, p.last)
		}
		q, ok := parsePart(PartName("shard=x/", p.first, p.last))
		if !ok || q.first != p.first || q.last != p.last {
			t.Fatalf("PartName of %d-%d does not parse back", p.first, p.last)
		}
	})
}

// FuzzLoadState: the state file is only a cache, so whatever it holds,
// loading it either works or fails with an error; it never panics.
func FuzzLoadState(f *testing.F) {
	f.Add([]byte(`{"version":1,"shards":{"a":{"last_seq":3}}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := loadState(path)
		if err == nil && st.Shards == nil {
			t.Fatal("a loaded state has no shard map")
		}
	})
}
