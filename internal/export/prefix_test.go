package export

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/export/synth"
)

// TestPrefixIsWholeSegments: Prefix selects on whole segments, as
// ListShards does: "a" exports a/x, not ab, and does not report gone a
// shard "ac" that the state file knows; a prefix with no shard under it,
// or a source without shards, is ErrNoShards, not an export of nothing.
func TestPrefixIsWholeSegments(t *testing.T) {
	ctx := context.Background()
	src := memstore.New()
	g := synth.New(9, 16)
	appendN(t, src, "a/x", g, 2, 2)
	appendN(t, src, "ab", g, 3, 3)
	statePath := filepath.Join(t.TempDir(), "state.json")
	st := newState()
	st.Shards["ac"] = stateShard{LastSeq: 4}
	if err := st.save(statePath); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(s Source, prefix string) (*Summary, error) {
		t.Helper()
		d := openDir(t, dir)
		defer d.Close()
		return Run(ctx, Options{Source: s, Dest: d, StatePath: statePath, Prefix: prefix})
	}
	store := NewStoreSource(src)
	s, err := run(store, "a")
	if err != nil || s.Records != 2 || len(s.Shards) != 1 || s.Shards[0].Shard != "a/x" {
		t.Fatalf("export of prefix a: %v, %+v; want a/x only", err, s)
	}
	for _, p := range []string{"zz", "a/y"} {
		if _, err := run(store, p); !errors.Is(err, ErrNoShards) || !strings.Contains(err.Error(), `no shard under prefix "`+p+`"`) {
			t.Errorf("export of prefix %q, under which no shard is: %v; want ErrNoShards naming it", p, err)
		}
	}
	if _, err := run(store, "*"); err == nil || errors.Is(err, ErrNoShards) {
		t.Errorf("export of prefix *: %v; want it refused as no prefix", err)
	}
	if _, err := run(NewStoreSource(memstore.New()), ""); !errors.Is(err, ErrNoShards) {
		t.Errorf("export of a source without shards: %v; want ErrNoShards", err)
	}
}
