package export

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// appendN appends n generated records to sh through a real shard writer,
// in batches of batch, and returns them as stored (with seq).
func appendN(t testing.TB, store blob.Store, sh string, g *synth.Gen, n, batch int) []*rolloutv1.Record {
	t.Helper()
	recs := make([]*rolloutv1.Record, n)
	for i := range recs {
		recs[i] = g.Record()
	}
	return appendRecs(t, store, sh, recs, batch)
}

// appendRecs appends recs to sh and sets their seqs.
func appendRecs(t testing.TB, store blob.Store, sh string, all []*rolloutv1.Record, batch int) []*rolloutv1.Record {
	t.Helper()
	n := len(all)
	ctx := context.Background()
	w, err := shard.Open(ctx, store, sh, shard.Options{DisableBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	var out []*rolloutv1.Record
	for i := 0; i < n; i += batch {
		var entries []shard.Entry
		var recs []*rolloutv1.Record
		for _, r := range all[i:min(i+batch, n)] {
			e, err := shard.Prepare(r, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, e)
			recs = append(recs, r)
		}
		res, err := w.Append(ctx, entries)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range res {
			recs[j].Seq = r.Seq
			if recs[j].CreatedAt == nil { // as the server fills it
				stored, err := shard.NewReader(store, shard.ReaderOptions{}).Get(ctx, sh, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				recs[j].CreatedAt = stored.GetCreatedAt()
			}
		}
		out = append(out, recs...)
	}
	return out
}

// dirParts reads every published part under root with parquet-go and
// returns the rows by file name (relative, with "/").
func dirParts(t testing.TB, root string) map[string][]Row {
	t.Helper()
	parts := map[string][]Row{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".parquet") {
			return err
		}
		rows, err := parquet.ReadFile[Row](p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		parts[filepath.ToSlash(rel)] = rows
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// blobParts reads every part in store.
func blobParts(t testing.TB, store blob.Store) map[string][]Row {
	t.Helper()
	ctx := context.Background()
	parts := map[string][]Row{}
	page, err := store.List(ctx, blob.ListOptions{Max: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		data, _, err := store.Get(ctx, it.Name, blob.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read[Row](readerAt(data), int64(len(data)))
		if err != nil {
			t.Fatalf("%s: %v", it.Name, err)
		}
		parts[it.Name] = rows
	}
	return parts
}

type readerAt []byte

func (b readerAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// checkExactlyOnce checks that parts hold exactly the seqs 1..want[shard]
// of each shard, each once, and that every part's name matches its rows.
func checkExactlyOnce(t testing.TB, parts map[string][]Row, want map[string]int) {
	t.Helper()
	seen := map[string][]int64{}
	for name, rows := range parts {
		p, ok := parsePart(name)
		if !ok {
			t.Errorf("part %s: name does not parse", name)
			continue
		}
		if len(rows) == 0 || uint64(rows[0].Seq) != p.first || uint64(rows[len(rows)-1].Seq) != p.last {
			t.Errorf("part %s: rows do not span its name's range", name)
		}
		for _, r := range rows {
			// A local directory hashes the folder of a long name.
			if !strings.HasPrefix(name, ShardDir(r.Shard)) && !strings.HasPrefix(name, LocalShardDir(r.Shard)) {
				t.Errorf("part %s holds a row of shard %q", name, r.Shard)
			}
			seen[r.Shard] = append(seen[r.Shard], r.Seq)
		}
	}
	for sh, n := range want {
		got := seen[sh]
		slices.Sort(got)
		if len(got) != n {
			t.Errorf("shard %s: %d rows exported, want %d", sh, len(got), n)
		}
		for i, s := range got {
			if s != int64(i+1) {
				t.Errorf("shard %s: row %d has seq %d, want %d (a record missing or exported twice)", sh, i, s, i+1)
				break
			}
		}
	}
	for sh := range seen {
		if _, ok := want[sh]; !ok {
			t.Errorf("rows of unexpected shard %s", sh)
		}
	}
}
