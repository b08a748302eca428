package export

import (
	"context"
	"strings"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// Attack 7 of docs/security.md: one corrupt manifest (10 bytes) fails
// only its own shard, by name and with its error; the shards around it
// are exported, and Run's error says one failed. Before, the listing
// itself failed and nothing was exported.
func TestCorruptShardFailsOnlyItself(t *testing.T) {
	ctx := context.Background()
	src := memstore.New()
	g := synth.New(3, 64)
	appendN(t, src, "a", g, 5, 5)
	appendN(t, src, "c", g, 4, 4)
	if _, err := src.Put(ctx, format.ManifestName("b"), []byte("0123456789"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d := openDir(t, dir)
	defer d.Close()
	sum, err := Run(ctx, Options{Source: NewStoreSource(src), Dest: d, RowsPerFile: 10})
	if err == nil || !strings.Contains(err.Error(), "1 of 3 shards failed") {
		t.Fatalf("Run with one corrupt shard: %v, want 1 of 3 failed", err)
	}
	if sum == nil || sum.Failed != 1 || sum.Records != 9 {
		t.Fatalf("summary %+v, want 9 records exported and 1 shard failed", sum)
	}
	for _, r := range sum.Shards {
		if r.Shard == "b" && (r.Status != StatusFailed || r.Error == "") {
			t.Fatalf("the corrupt shard: %+v", r)
		}
	}
	checkExactlyOnce(t, dirParts(t, dir), map[string]int{"a": 5, "c": 4})
}
