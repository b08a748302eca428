package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/shard"
)

func openDir(t testing.TB, dir string) *DirDest {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestCrossReadArrow exports shards with parquet-go and reads every part
// back with the other library, arrow-go, checking each column's type and
// each row against the stored record, field by field.
func TestCrossReadArrow(t *testing.T) {
	ctx := context.Background()
	src := memstore.New()
	g := synth.New(7, 300)
	// Besides generated records, one with every optional and repeated
	// field empty, and one with a binary payload and a score.
	odd := []*rolloutv1.Record{{Id: "bare"}, {Id: "full", BinaryPayload: []byte{0, 1, 2, 255}, Score: proto.Float32(0.5), Role: rolloutv1.Role_ROLE_ARTIFACT}}
	want := map[string][]*rolloutv1.Record{
		"exp-1/actor-0": appendN(t, src, "exp-1/actor-0", g, 70, 16),
		"exp-1/actor-1": append(appendN(t, src, "exp-1/actor-1", g, 3, 3), appendRecs(t, src, "exp-1/actor-1", odd, 2)...),
	}
	dir := t.TempDir()
	d := openDir(t, dir)
	sum, err := Run(ctx, Options{Source: NewStoreSource(src), Dest: d, RowsPerFile: 32})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 75 || sum.Parts != 4 {
		t.Fatalf("summary: %d records in %d parts, want 75 in 4", sum.Records, sum.Parts)
	}
	got := map[string][]arrowRow{}
	err = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(p, ".parquet") {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		rows, err := readArrow(f)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, r := range rows {
			got[r.Shard] = append(got[r.Shard], r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for sh, recs := range want {
		rows := got[sh]
		slices.SortFunc(rows, func(a, b arrowRow) int { return int(a.Seq - b.Seq) })
		if len(rows) != len(recs) {
			t.Fatalf("shard %s: %d rows, want %d", sh, len(rows), len(recs))
		}
		for i, rec := range recs {
			if diff := diffArrow(rows[i], rec); diff != "" {
				t.Errorf("shard %s seq %d: %s", sh, rec.GetSeq(), diff)
			}
		}
	}
}

// TestRowGroupsCrossRead writes a part of several row groups, whose
// columns partWriter encodes on several goroutines at once at the end of
// each (flushColumns), and reads every row back with arrow-go.
func TestRowGroupsCrossRead(t *testing.T) {
	g := synth.New(11, 1024)
	recs := make([]*rolloutv1.Record, 1500) // about 7 MB stored: 3 row groups and more
	for i := range recs {
		recs[i] = g.Record()
		recs[i].Seq = uint64(i + 1)
	}
	var buf bytes.Buffer
	pw, err := newPartWriter(&buf, "exp-2/actor-0", Zstd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(recs); i += scanBatch {
		if err := pw.write(recs[i:min(i+scanBatch, len(recs))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.close(); err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	groups := pf.NumRowGroups()
	pf.Close()
	if groups < 3 {
		t.Fatalf("%d row groups, want 3 or more", groups)
	}
	rows, err := readArrow(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(recs) {
		t.Fatalf("%d rows, want %d", len(rows), len(recs))
	}
	for i, rec := range recs {
		if diff := diffArrow(rows[i], rec); diff != "" {
			t.Errorf("row %d (seq %d): %s", i, rec.GetSeq(), diff)
		}
	}
}

func diffArrow(r arrowRow, rec *rolloutv1.Record) string {
	var d []string
	check := func(name string, ok bool) {
		if !ok {
			d = append(d, name)
		}
	}
	f32 := func(a, b *float32) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	check("id", r.ID == rec.GetId())
	check("seq", r.Seq == int64(rec.GetSeq()))
	check("role", r.Role == rec.GetRole().String())
	check("content", r.Content == rec.GetContent())
	check("policy_version", r.PolicyVersion == rec.GetPolicyVersion())
	check("created_at", r.CreatedAt != nil && r.CreatedAt.Equal(rec.GetCreatedAt().AsTime().Truncate(1000)))
	check("input_tokens", slices.Equal(r.InputTokens, rec.GetInputTokens()))
	check("output_tokens", slices.Equal(r.OutputTokens, rec.GetOutputTokens()))
	check("output_logprobs", slices.Equal(r.OutputLogprobs, rec.GetOutputLogprobs()))
	check("ref_logprobs", slices.Equal(r.RefLogprobs, rec.GetRefLogprobs()))
	check("loss_mask", bytes.Equal(r.LossMask, rec.GetLossMask()))
	check("binary_payload", bytes.Equal(r.BinaryPayload, rec.GetBinaryPayload()))
	check("reward", f32(r.Reward, rec.Reward))
	check("advantage", f32(r.Advantage, rec.Advantage))
	check("score", f32(r.Score, rec.Score))
	check("include_in_training", r.IncludeInTraining == rec.GetIncludeInTraining())
	var rels []Relationship
	for _, x := range rec.GetRelationships() {
		rels = append(rels, Relationship{x.GetTargetId(), x.GetRelation(), x.GetWeight()})
	}
	check("relationships", slices.Equal(r.Relationships, rels))
	check("metadata", len(r.Metadata) == len(rec.GetMetadata()) && func() bool {
		for k, v := range rec.GetMetadata() {
			if r.Metadata[k] != v {
				return false
			}
		}
		return true
	}())
	if len(d) == 0 {
		return ""
	}
	return "differs in " + strings.Join(d, ", ")
}

// TestIncremental exports, appends, exports again: the second run adds
// only the new records, in parts after the first run's, and the state file
// never overrides the parts.
func TestIncremental(t *testing.T) {
	ctx := context.Background()
	src := memstore.New()
	g := synth.New(3, 64)
	appendN(t, src, "a", g, 25, 10)
	appendN(t, src, "b/c", g, 3, 3)
	dir := t.TempDir()
	statePath := filepath.Join(t.TempDir(), "state.json")
	run := func() *Summary {
		t.Helper()
		d := openDir(t, dir)
		defer d.Close()
		sum, err := Run(ctx, Options{Source: NewStoreSource(src), Dest: d, RowsPerFile: 10, StatePath: statePath})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	s1 := run()
	if s1.Records != 28 || s1.Parts != 4 {
		t.Fatalf("first run: %d records in %d parts, want 28 in 4", s1.Records, s1.Parts)
	}
	if _, err := os.Stat(filepath.Join(dir, "shard=b%2Fc", "part-1-3.parquet")); err != nil {
		t.Fatalf("Hive layout: %v", err)
	}
	s2 := run()
	if s2.Records != 0 || s2.Parts != 0 {
		t.Fatalf("rerun with nothing new exported %d records", s2.Records)
	}
	appendN(t, src, "a", g, 7, 7)
	s3 := run()
	if s3.Records != 7 || s3.Parts != 1 || s3.Shards[0].Parts[0] != "shard=a/part-26-32.parquet" {
		t.Fatalf("third run: %+v", s3.Shards)
	}
	checkExactlyOnce(t, dirParts(t, dir), map[string]int{"a": 32, "b/c": 3})

	// A state file that claims less (a run stopped before saving it) or
	// more (parts removed by hand) than the parts loses to them.
	writeState := func(seq uint64) {
		b, _ := json.Marshal(state{Version: stateVersion, Shards: map[string]stateShard{"a": {LastSeq: seq}, "b/c": {LastSeq: 3}}})
		if err := os.WriteFile(statePath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeState(5)
	if s := run(); s.Records != 0 || !strings.Contains(s.Shards[0].Note, "the parts win") {
		t.Fatalf("behind state file: %+v", s.Shards[0])
	}
	if err := os.Remove(filepath.Join(dir, "shard=a", "part-26-32.parquet")); err != nil {
		t.Fatal(err)
	}
	writeState(32)
	if s := run(); s.Records != 7 {
		t.Fatalf("state file ahead of the parts: exported %d records, want 7", s.Records)
	}
	checkExactlyOnce(t, dirParts(t, dir), map[string]int{"a": 32, "b/c": 3})
}

var errKilled = errors.New("killed")

// killer is a hook that kills the run at its k-th step: that step and
// every later one fail, as in a process that died there.
type killer struct {
	k, n  int
	steps []string
}

func (k *killer) hook(step string) error {
	k.n++
	k.steps = append(k.steps, step)
	if k.k > 0 && k.n >= k.k {
		return fmt.Errorf("%w at step %d (%s)", errKilled, k.n, step)
	}
	return nil
}

// TestCrashAtEveryStep runs an export to completion, appends, kills the
// next run at every step in turn, appends, and runs again (and again,
// killed later): every record ends up in exactly one published part. It runs on a local directory (link
// publishing, each of its steps a kill point) and on a blob store (create-
// only put) whose puts also lose their responses after landing.
func TestCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	dests := []struct {
		name string
		open func(t *testing.T) (Dest, func() map[string][]Row, *faultstore.Store)
	}{
		{"dir", func(t *testing.T) (Dest, func() map[string][]Row, *faultstore.Store) {
			dir := t.TempDir()
			return nil, func() map[string][]Row { return dirParts(t, dir) }, nil
		}},
		{"blob", func(t *testing.T) (Dest, func() map[string][]Row, *faultstore.Store) {
			fs := faultstore.New(memstore.New(), 1)
			return &BlobDest{Store: fs, Name: "mem://", Retries: 2}, func() map[string][]Row { return blobParts(t, fs.Inner()) }, fs
		}},
	}
	for _, dc := range dests {
		t.Run(dc.name, func(t *testing.T) {
			// Count the steps of an unkilled run first.
			total := 0
			for k := 1; ; k++ {
				src := memstore.New()
				g := synth.New(uint64(k), 32)
				n := map[string]int{"s1": 23, "s2/x": 4}
				for sh, c := range n {
					appendN(t, src, sh, g, c, 5)
				}
				dest, parts, fs := dc.open(t)
				var dir string
				if dest == nil {
					dir = t.TempDir()
				}
				statePath := filepath.Join(t.TempDir(), "state.json")
				runWith := func(kl *killer) error {
					d := dest
					if d == nil {
						dd := openDir(t, dir)
						defer dd.Close()
						dd.hook = kl.hook
						d = dd
					}
					_, err := Run(ctx, Options{Source: NewStoreSource(src), Dest: d, RowsPerFile: 6, StatePath: statePath, hook: kl.hook})
					return err
				}
				if dest == nil {
					parts = func() map[string][]Row { return dirParts(t, dir) }
				}
				// A complete run first, so that the state file exists and
				// falls behind the parts when a later run is killed after
				// publishing; then appends for the killed run to export.
				if err := runWith(&killer{}); err != nil {
					t.Fatal(err)
				}
				n["s1"] += 9
				appendN(t, src, "s1", g, 9, 3)
				n["s2/x"] += 7
				appendN(t, src, "s2/x", g, 7, 7)
				if fs != nil && k%3 == 0 {
					// The (k/3)-th put lands but its response is lost.
					fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.LoseResponse, Skip: k / 3, Count: 1})
				}
				kl := &killer{k: k}
				err := runWith(kl)
				if err == nil {
					total = kl.n
					if fs != nil {
						fs.Clear()
					}
					checkExactlyOnce(t, parts(), n)
					break
				}
				if !errors.Is(err, errKilled) {
					t.Fatalf("kill at step %d: run failed otherwise: %v", k, err)
				}
				// Appends land between the runs; the next run is killed
				// later, then a last one completes.
				n["s1"] += 4
				appendN(t, src, "s1", g, 4, 4)
				if err := runWith(&killer{k: k + 5}); err != nil && !errors.Is(err, errKilled) {
					t.Fatalf("second run after a kill at step %d: %v", k, err)
				}
				n["s2/x"] += 2
				appendN(t, src, "s2/x", g, 2, 2)
				if fs != nil {
					fs.Clear()
				}
				if err := runWith(&killer{}); err != nil {
					t.Fatalf("last run after a kill at step %d: %v", k, err)
				}
				checkExactlyOnce(t, parts(), n)
				if t.Failed() {
					t.Fatalf("after a kill at step %d (%v)", k, kl.steps[len(kl.steps)-1])
				}
			}
			t.Logf("killed at each of %d steps", total)
			if total < 12 {
				t.Fatalf("an unkilled run took only %d steps", total)
			}
		})
	}
}

var _ blob.Store = (*faultstore.Store)(nil)

// namedSource lists only the shards it is told of, as ClientSource does.
type namedSource struct {
	*StoreSource
	names []string
}

func (n namedSource) NamedShards() bool { return true }

func (n namedSource) Shards(ctx context.Context, prefix string) ([]ShardRef, error) {
	all, err := n.StoreSource.Shards(ctx, prefix)
	var refs []ShardRef
	for _, r := range all {
		if slices.Contains(n.names, r.Name) {
			refs = append(refs, r)
		}
	}
	return refs, err
}

// TestGoneShards: a shard the state file knew and the store no longer
// lists is reported gone; a shard a named source was not told of this
// time is not.
func TestGoneShards(t *testing.T) {
	ctx := context.Background()
	src := memstore.New()
	g := synth.New(9, 16)
	appendN(t, src, "a", g, 3, 3)
	appendN(t, src, "b", g, 2, 2)
	dir := t.TempDir()
	statePath := filepath.Join(t.TempDir(), "state.json")
	run := func(s Source) *Summary {
		t.Helper()
		d := openDir(t, dir)
		defer d.Close()
		sum, err := Run(ctx, Options{Source: s, Dest: d, StatePath: statePath})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	store := NewStoreSource(src)
	if s := run(namedSource{store, []string{"a", "b"}}); s.Records != 5 {
		t.Fatalf("first run: %+v", s)
	}
	if s := run(namedSource{store, []string{"a"}}); len(s.Shards) != 1 || s.Shards[0].Status != StatusUpToDate {
		t.Fatalf("a named source not told of b reported: %+v", s.Shards)
	}
	st, err := loadState(statePath)
	if err != nil {
		t.Fatal(err)
	}
	st.Shards["zz"] = stateShard{LastSeq: 4}
	if err := st.save(statePath); err != nil {
		t.Fatal(err)
	}
	s := run(store)
	if len(s.Shards) != 3 || s.Shards[2].Shard != "zz" || s.Shards[2].Status != StatusGone {
		t.Fatalf("a shard gone from the store: %+v", s.Shards)
	}
	// The state said seq 4, but DEST holds nothing of zz.
	if want := "no longer in the source; DEST holds no parts of it"; s.Shards[2].Note != want {
		t.Fatalf("gone zz says %q, want %q", s.Shards[2].Note, want)
	}
	if s := run(store); len(s.Shards) != 2 {
		t.Fatalf("a gone shard is reported once: %+v", s.Shards)
	}
}

// TestDeletedShards: a shard deleted (issue 23) is reported gone and its
// parts stay; written again, its new records are exported after the old
// parts, and the summary says it was re-created.
func TestDeletedShards(t *testing.T) {
	ctx := context.Background()
	src := memstore.New()
	g := synth.New(13, 16)
	appendN(t, src, "d/x", g, 5, 5)
	appendN(t, src, "d/y", g, 3, 3)
	appendN(t, src, "d/z", g, 1, 1) // deleted before any export
	if _, err := shard.Delete(ctx, src, "d/z", shard.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	statePath := filepath.Join(t.TempDir(), "state.json")
	run := func() *Summary {
		t.Helper()
		d := openDir(t, dir)
		defer d.Close()
		sum, err := Run(ctx, Options{Source: NewStoreSource(src), Dest: d, StatePath: statePath})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if s := run(); len(s.Shards) != 3 || s.Shards[2].Note != "deleted (incarnation 1); DEST holds no parts of it" {
		t.Fatalf("a shard deleted before any export: %+v", s.Shards)
	}
	appendN(t, src, "d/x", g, 2, 2) // never exported: deleted first
	if _, err := shard.Delete(ctx, src, "d/x", shard.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := run()
	if len(s.Shards) != 3 || s.Shards[0].Status != StatusGone || s.Shards[0].Note != "deleted (incarnation 1); its 1 part stays in DEST" {
		t.Fatalf("after a delete: %+v", s.Shards)
	}
	appendN(t, src, "d/x", g, 4, 4) // written again: seqs 8..11
	s = run()
	if s.Shards[0].Status != StatusExported || s.Shards[0].Records != 4 || !strings.Contains(s.Shards[0].Note, "written again") {
		t.Fatalf("after writing the deleted shard again: %+v", s.Shards[0])
	}
	parts := dirParts(t, dir)
	var seqs []int64
	for name, rows := range parts {
		if strings.HasPrefix(name, ShardDir("d/x")) {
			for _, r := range rows {
				seqs = append(seqs, r.Seq)
			}
		}
	}
	slices.Sort(seqs)
	if want := []int64{1, 2, 3, 4, 5, 8, 9, 10, 11}; !slices.Equal(seqs, want) {
		t.Fatalf("d/x exported seqs %v, want %v (the first incarnation's exported ones, then the second's)", seqs, want)
	}
	if s := run(); s.Records != 0 || s.Shards[0].Note != "" {
		t.Fatalf("a rerun: %+v", s.Shards)
	}
}
