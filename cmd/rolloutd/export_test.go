package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/export"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/duckdb"
)

// runExportCmd runs the real binary's export subcommand.
func runExportCmd(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"export", "--progress", "plain"}, args...)...)
	cmd.Env = append(cmd.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func exportJSON(t *testing.T, env []string, args ...string) export.Summary {
	t.Helper()
	out, errOut, err := runExportCmd(t, env, append(args, "--json")...)
	if err != nil {
		t.Fatalf("export %v: %v\n%s", args, err, errOut)
	}
	var s export.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("export --json: %v\n%s", err, out)
	}
	return s
}

// TestExportReadByDuckDB appends records through the real server, exports
// them through its Scan (the embedded store it holds is locked), and reads
// the parts with DuckDB, a reader nobody here wrote: row counts per shard,
// a sample of rows field by field against Get, and avg(reward) by
// policy_version against a Scan. Then appends and a deleted shard: a
// rerun, listing the shards with ListShards, exports only the new records
// and reports the deleted shard gone; once the server has stopped, a
// direct export finds nothing new: both paths share the published parts.
func TestExportReadByDuckDB(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	p := start(t, nil, "--store", data)
	g := synth.New(11, 200)
	counts := map[string]int{"exp-9/actor-0": 130, "exp-9/actor-1": 41, "exp-9/grades": 7}
	bare := false
	appendAll := func(counts map[string]int) {
		for sh, n := range counts {
			for i := 0; i < n; i += 50 {
				var recs []*rolloutv1.Record
				for range min(50, n-i) {
					recs = append(recs, g.Record())
				}
				if sh == "exp-9/grades" && !bare {
					bare = true
					// Nulls, empty lists and maps, and a binary payload.
					recs[0] = &rolloutv1.Record{Id: "bare", Role: rolloutv1.Role_ROLE_ARTIFACT, BinaryPayload: []byte{0, 1, 254, 255}}
				}
				if _, err := p.Client.Append(ctx, &rolloutv1.AppendRequest{Shard: sh, Records: recs}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	appendAll(counts)
	out := t.TempDir()

	_, errOut, err := runExportCmd(t, nil, "--store", data, "--prefix", "", "--out", out)
	if err == nil || !strings.Contains(errOut, "--server") {
		t.Fatalf("export of a directory a server holds: %v, stderr %q; want an error naming --server", err, errOut)
	}

	// A --shard outside --prefix is refused now (TestExportSelection).
	shardArgs := []string{"--shard", "exp-9/actor-0", "--shard", "exp-9/actor-1", "--shard", "exp-9/grades"}
	state := filepath.Join(t.TempDir(), "state.json")
	args := append([]string{"--server", p.GRPCAddr, "--prefix", "exp-9/", "--out", out, "--since-state", state, "--rows-per-file", "50"}, shardArgs...)
	s := exportJSON(t, nil, args...)
	if s.Records != 178 || s.Failed != 0 || len(s.Shards) != 3 {
		t.Fatalf("summary: %+v", s)
	}

	glob := fmt.Sprintf("read_parquet('%s/**/*.parquet', hive_partitioning=true)", out)
	checkCounts := func(want map[string]int) {
		t.Helper()
		rows := duckdb.Query(t, "SELECT shard, count(*) AS n, count(DISTINCT seq) AS d, max(seq) AS m FROM "+glob+" GROUP BY shard ORDER BY shard")
		if len(rows) != len(want) {
			t.Fatalf("DuckDB sees shards %v, want %v", rows, want)
		}
		for _, r := range rows {
			n := want[r["shard"].(string)]
			if r["n"] != strconv.Itoa(n) || r["d"] != strconv.Itoa(n) || r["m"] != strconv.Itoa(n) {
				t.Errorf("DuckDB: shard %v has %v rows, %v distinct seqs, max %v; want %d", r["shard"], r["n"], r["d"], r["m"], n)
			}
		}
	}
	checkCounts(counts)

	// A sample of rows, field by field, against Get.
	sample := duckdb.Query(t, `SELECT shard, id, seq, rollout_id, problem_id, dataset, sequence_order, role,
		strftime(created_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%fZ') AS created_at, content, content_type,
		input_tokens, output_tokens, output_logprobs, ref_logprobs, hex(loss_mask) AS loss_mask, reward, advantage, score,
		policy_version, include_in_training, grader_id, relationships, metadata, hex(binary_payload) AS binary_payload
		FROM `+glob+` WHERE seq % 13 = 1 OR id = 'bare' ORDER BY shard, seq`)
	if len(sample) < 10 {
		t.Fatalf("sample of %d rows", len(sample))
	}
	for _, row := range sample {
		got, err := p.Client.Get(ctx, &rolloutv1.GetRequest{Shard: row["shard"].(string), Id: row["id"].(string)})
		if err != nil {
			t.Fatal(err)
		}
		if d := diffDuck(row, got.GetRecord()); d != "" {
			t.Errorf("shard %v id %v: %s", row["shard"], row["id"], d)
		}
	}

	// avg(reward) by policy_version, against the same figure from a Scan.
	type acc struct {
		sum float64
		n   int
	}
	want := map[string]*acc{}
	for sh := range counts {
		stream, err := p.Client.Scan(ctx, &rolloutv1.ScanRequest{Shard: sh})
		if err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			for _, r := range resp.GetRecords() {
				if r.Reward != nil {
					a := want[r.GetPolicyVersion()]
					if a == nil {
						a = &acc{}
						want[r.GetPolicyVersion()] = a
					}
					a.sum += float64(r.GetReward())
					a.n++
				}
			}
		}
	}
	avgs := duckdb.Query(t, "SELECT policy_version, avg(reward) AS a, count(reward) AS n FROM "+glob+" GROUP BY policy_version HAVING count(reward) > 0 ORDER BY policy_version")
	if len(avgs) != len(want) {
		t.Fatalf("DuckDB averages %v; Scan has %d policy versions with rewards", avgs, len(want))
	}
	for _, r := range avgs {
		w := want[r["policy_version"].(string)]
		if w == nil || r["n"] != strconv.Itoa(w.n) || math.Abs(r["a"].(float64)-w.sum/float64(w.n)) > 1e-6 {
			t.Errorf("policy %v: DuckDB avg %v over %v, Scan %v", r["policy_version"], r["a"], r["n"], w)
		}
	}

	// Incremental: only what was appended since; the server's ListShards
	// names the shards now (no --shard), and a deleted shard is reported
	// gone, its parts kept.
	more := map[string]int{"exp-9/actor-0": 12, "exp-9/actor-1": 0, "exp-9/grades": 3}
	appendAll(map[string]int{"exp-9/actor-0": 12, "exp-9/grades": 3})
	if _, err := p.Client.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: "exp-9/actor-1"}); err != nil {
		t.Fatal(err)
	}
	s = exportJSON(t, nil, "--server", p.GRPCAddr, "--prefix", "exp-9/", "--out", out, "--since-state", state, "--rows-per-file", "50")
	if s.Records != 15 || len(s.Shards) != 3 || s.Shards[1].Shard != "exp-9/actor-1" || s.Shards[1].Status != export.StatusGone {
		t.Fatalf("rerun: %d records, want 15: %+v", s.Records, s.Shards)
	}
	for sh, n := range more {
		counts[sh] += n
	}
	checkCounts(counts)

	// Once the server is gone, a direct export reads the directory and
	// finds everything already published.
	if code, _ := p.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("server exit code %d", code)
	}
	if s := exportJSON(t, nil, "--store", data, "--prefix", "exp-9/", "--out", out, "--since-state", state); s.Records != 0 || len(s.Shards) != 3 || s.Shards[1].Status != export.StatusGone {
		t.Fatalf("direct export after the server's: %+v", s)
	}
	checkCounts(counts)
}

// diffDuck compares a row as DuckDB returned it with the record Get
// returned, field by field.
func diffDuck(row map[string]any, rec *rolloutv1.Record) string {
	var d []string
	check := func(name string, ok bool) {
		if !ok {
			d = append(d, fmt.Sprintf("%s (DuckDB %v)", name, row[name]))
		}
	}
	str := func(name, want string) { check(name, row[name] == want) }
	str("id", rec.GetId())
	str("seq", strconv.FormatUint(rec.GetSeq(), 10))
	str("rollout_id", rec.GetRolloutId())
	str("problem_id", rec.GetProblemId())
	str("dataset", rec.GetDataset())
	check("sequence_order", row["sequence_order"] == float64(rec.GetSequenceOrder()))
	str("role", rec.GetRole().String())
	str("created_at", rec.GetCreatedAt().AsTime().UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z"))
	str("content", rec.GetContent())
	str("content_type", rec.GetContentType())
	ints := func(name string, want []int32) {
		l, _ := row[name].([]any)
		ok := len(l) == len(want)
		for i := 0; ok && i < len(l); i++ {
			ok = l[i] == float64(want[i])
		}
		check(name, ok)
	}
	ints("input_tokens", rec.GetInputTokens())
	ints("output_tokens", rec.GetOutputTokens())
	floats := func(name string, want []float32) {
		l, _ := row[name].([]any)
		ok := len(l) == len(want)
		for i := 0; ok && i < len(l); i++ {
			f, isNum := l[i].(float64)
			ok = isNum && float32(f) == want[i]
		}
		check(name, ok)
	}
	floats("output_logprobs", rec.GetOutputLogprobs())
	floats("ref_logprobs", rec.GetRefLogprobs())
	str("loss_mask", strings.ToUpper(hex.EncodeToString(rec.GetLossMask())))
	str("binary_payload", strings.ToUpper(hex.EncodeToString(rec.GetBinaryPayload())))
	opt := func(name string, want *float32) {
		f, isNum := row[name].(float64)
		check(name, (want == nil && row[name] == nil) || (want != nil && isNum && float32(f) == *want))
	}
	opt("reward", rec.Reward)
	opt("advantage", rec.Advantage)
	opt("score", rec.Score)
	str("policy_version", rec.GetPolicyVersion())
	check("include_in_training", row["include_in_training"] == rec.GetIncludeInTraining())
	str("grader_id", rec.GetGraderId())
	rels, _ := row["relationships"].([]any)
	ok := len(rels) == len(rec.GetRelationships())
	for i := 0; ok && i < len(rels); i++ {
		m, _ := rels[i].(map[string]any)
		w := rec.GetRelationships()[i]
		ok = m["target_id"] == w.GetTargetId() && m["relation"] == w.GetRelation() && m["weight"] == float64(w.GetWeight())
	}
	check("relationships", ok)
	md, _ := row["metadata"].([]any)
	got := map[string]string{}
	for _, kv := range md {
		m, _ := kv.(map[string]any)
		k, _ := m["key"].(string)
		v, _ := m["value"].(string)
		got[k] = v
	}
	keys := func(m map[string]string) []string {
		var ks []string
		for k, v := range m {
			ks = append(ks, k+"="+v)
		}
		slices.Sort(ks)
		return ks
	}
	check("metadata", slices.Equal(keys(got), keys(rec.GetMetadata())))
	if len(d) == 0 {
		return ""
	}
	return "differs in " + strings.Join(d, ", ")
}

// TestExportOnAzurite exports from Azure storage directly while the server
// runs on it (what is in the container is durable), to an azblob://
// destination, twice, with appends between: the parts in the destination
// container hold every record exactly once.
func TestExportOnAzurite(t *testing.T) {
	ctx := context.Background()
	env, store := azureEnv(t)
	p := start(t, env, "--store", store)
	g := synth.New(5, 100)
	appendTo := func(sh string, n int) {
		var recs []*rolloutv1.Record
		for range n {
			recs = append(recs, g.Record())
		}
		if _, err := p.Client.Append(ctx, &rolloutv1.AppendRequest{Shard: sh, Records: recs}); err != nil {
			t.Fatal(err)
		}
	}
	appendTo("exp-a/s1", 60)
	appendTo("exp-a/s2", 5)
	appendTo("exp-b/s3", 3)
	out := store + "-out/exports"
	args := []string{"--store", store, "--prefix", "exp-a/", "--out", out, "--rows-per-file", "25"}
	if s := exportJSON(t, env, args...); s.Records != 65 || s.Parts != 4 || len(s.Shards) != 2 {
		t.Fatalf("first export: %+v", s)
	}
	appendTo("exp-a/s1", 10)
	if s := exportJSON(t, env, args...); s.Records != 10 || s.Parts != 1 {
		t.Fatalf("second export: %+v", s)
	}

	dest := readStore(t, store+"-out")
	page, err := dest.List(ctx, blob.ListOptions{Prefix: "exports/"})
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]int64{}
	for _, it := range page.Items {
		data, _, err := dest.Get(ctx, it.Name, blob.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rows, err := parquet.Read[export.Row](bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("%s: %v", it.Name, err)
		}
		for _, r := range rows {
			if !strings.HasPrefix(it.Name, "exports/"+export.ShardDir(r.Shard)) {
				t.Errorf("%s holds a row of %s", it.Name, r.Shard)
			}
			seqs[r.Shard] = append(seqs[r.Shard], r.Seq)
		}
	}
	for sh, n := range map[string]int{"exp-a/s1": 70, "exp-a/s2": 5} {
		got := seqs[sh]
		slices.Sort(got)
		want := make([]int64, n)
		for i := range want {
			want[i] = int64(i + 1)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: seqs %v, want 1..%d once each", sh, got, n)
		}
	}
	if len(seqs) != 2 {
		t.Errorf("shards exported: %v", slices.Collect(maps.Keys(seqs)))
	}
}

// TestExportKilled kills real export processes (SIGKILL) at varied points,
// with appends landing between the runs, then lets one finish: every
// record is in exactly one published part, and no temporary is left.
func TestExportKilled(t *testing.T) {
	ctx := context.Background()
	data, out := t.TempDir(), t.TempDir()
	g := synth.New(21, 1024)
	counts := map[string]int{}
	appendLocal := func(n int) {
		t.Helper()
		s, err := localstore.Open(data)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, sh := range []string{"k/a", "k/b"} {
			w, err := shard.Open(ctx, s, sh, shard.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var entries []shard.Entry
			for range n {
				e, err := shard.Prepare(g.Record(), time.Now())
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, e)
			}
			if _, err := w.Append(ctx, entries); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			counts[sh] += n
		}
	}
	appendLocal(1500)
	killed := 0
	for i, delay := range []time.Duration{10, 30, 60, 120, 250, 500} {
		cmd := exec.Command(binary, "export", "--store", data, "--prefix", "", "--out", out, "--rows-per-file", "97", "--progress", "off")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			killed++
		}
		parts, _ := filepath.Glob(filepath.Join(out, "*", "*.parquet"))
		temps, _ := filepath.Glob(filepath.Join(out, "*", ".tmp-*"))
		t.Logf("killed after %v: %d parts, %d temporaries", delay*time.Millisecond, len(parts), len(temps))
		appendLocal(40 + i)
	}
	if killed < 2 {
		t.Errorf("only %d of 6 exports were killed before they finished; the test needs slower exports or shorter delays", killed)
	}
	if _, errOut, err := runExportCmd(t, nil, "--store", data, "--prefix", "", "--out", out, "--rows-per-file", "97"); err != nil {
		t.Fatalf("last export: %v\n%s", err, errOut)
	}
	seqs := map[string][]int64{}
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.Contains(d.Name(), ".tmp-") {
			t.Errorf("temporary left: %s", p)
		}
		if !strings.HasSuffix(p, ".parquet") {
			return nil
		}
		rows, err := parquet.ReadFile[export.Row](p)
		if err != nil {
			return err
		}
		for _, r := range rows {
			seqs[r.Shard] = append(seqs[r.Shard], r.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for sh, n := range counts {
		got := seqs[sh]
		slices.Sort(got)
		ok := len(got) == n
		for i := 0; ok && i < n; i++ {
			ok = got[i] == int64(i+1)
		}
		if !ok {
			t.Errorf("%s: %d rows exported for %d records, or some twice", sh, len(got), n)
		}
	}
	t.Logf("%d of 6 exports killed midway; %v records", killed, counts)
}
