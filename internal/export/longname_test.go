package export

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/testutil/duckdb"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// TestLongShardNamesExportToADirectory exports the longest valid shard
// names, whose escaped "shard=" folder would pass a file system's 255-byte
// name limit, to a local directory, twice (the second run finds the parts
// and adds nothing), and reads them back with DuckDB's Hive partitioning:
// every shard, long or short, is its own name in the shard column.
func TestLongShardNamesExportToADirectory(t *testing.T) {
	seg := func(c string) string { return strings.Repeat(c, validate.MaxSegmentBytes) }
	long := seg("a") + "/" + seg("b") + "/" + seg("c") + "/" + seg("d") // 255 bytes, 3 slashes
	long2 := seg("a") + "/" + seg("b") + "/" + seg("c") + "/" + seg("e")
	short := "exp-1/actor-2"
	for _, sh := range []string{long, long2} {
		if err := validate.Shard(sh); err != nil || len(sh) != validate.MaxShardBytes {
			t.Fatalf("%d-byte test shard: %v", len(sh), err)
		}
	}
	src := memstore.New()
	g := synth.New(5, 32)
	want := map[string]int{long: 7, long2: 3, short: 5}
	for sh, n := range want {
		appendN(t, src, sh, g, n, n)
	}
	dir := t.TempDir()
	run := func() *Summary {
		t.Helper()
		d := openDir(t, dir)
		defer d.Close()
		sum, err := Run(context.Background(), Options{Source: NewStoreSource(src), Dest: d})
		if err != nil {
			t.Fatal(err)
		}
		if sum.Failed != 0 {
			t.Fatalf("%d shards failed: %+v", sum.Failed, sum.Shards)
		}
		return sum
	}
	if s := run(); s.Records != 15 {
		t.Fatalf("first run exported %d records, want 15", s.Records)
	}
	if s := run(); s.Records != 0 {
		t.Fatalf("rerun exported %d records again", s.Records)
	}
	if _, err := os.Stat(filepath.Join(dir, "shard=exp-1%2Factor-2")); err != nil {
		t.Fatalf("a short name's folder changed: %v", err)
	}
	checkExactlyOnce(t, dirParts(t, dir), want)

	// The shard column is the authority: without Hive partitioning every
	// shard is its name.
	read := func(hive bool) string {
		return fmt.Sprintf("read_parquet('%s/**/*.parquet', hive_partitioning = %v)", dir, hive)
	}
	rows := duckdb.Query(t, "SELECT shard, count(*) AS n FROM "+read(false)+" GROUP BY shard ORDER BY shard")
	if len(rows) != len(want) {
		t.Fatalf("DuckDB sees %v, want shards %v", rows, want)
	}
	for _, r := range rows {
		sh, _ := r["shard"].(string)
		if n, ok := want[sh]; !ok || r["n"] != fmt.Sprint(n) {
			t.Errorf("DuckDB: shard %q (%d bytes) has %v rows; want one of the exported shards with its count", sh, len(sh), r["n"])
		}
	}
	// With it, DuckDB takes the path's value, which for a long name is
	// '~' || sha256(name), as docs/export.md says: that finds (and
	// prunes to) the long shard's folder.
	q := fmt.Sprintf("SELECT count(*) AS n FROM %s WHERE shard = '~' || sha256('%s')", read(true), long)
	if rows := duckdb.Query(t, q); len(rows) != 1 || rows[0]["n"] != "7" {
		t.Errorf("DuckDB with Hive partitioning, the long shard by its folder's value: %v, want 7 rows", rows)
	}
	q = fmt.Sprintf("SELECT count(*) AS n FROM %s WHERE shard = '%s'", read(true), short)
	if rows := duckdb.Query(t, q); len(rows) != 1 || rows[0]["n"] != "5" {
		t.Errorf("DuckDB with Hive partitioning, a short shard by name: %v, want 5 rows", rows)
	}
}
