package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// writeShards writes n records to each shard of counts in the data
// directory dir; a shard with 0 is opened and closed, so it exists empty.
func writeShards(t *testing.T, dir string, counts map[string]int) {
	t.Helper()
	ctx := context.Background()
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := synth.New(3, 64)
	for sh, n := range counts {
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
		if n > 0 {
			if _, err := w.Append(ctx, entries); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

type selectionCase struct {
	args []string
	want []string // in stderr (a success) or the error message
	ok   bool
}

// TestExportSelection: export selects shards on whole segments, through
// storage and through a server alike; a selection that matches no shard
// fails, naming what was asked and what exists near it, instead of
// reporting the export of nothing; --shard needs no --prefix; an empty
// shard that exists is a match, exported with 0 records.
func TestExportSelection(t *testing.T) {
	data := t.TempDir()
	writeShards(t, data, map[string]int{"demo/a": 2, "demo/b": 1, "delta": 1, "empty": 0})
	check := func(src []string, cases []selectionCase) {
		t.Helper()
		for _, tc := range cases {
			args := append(append(append([]string{}, src...), tc.args...), "--out", t.TempDir())
			// Without the race detector's second of sleep at a clean
			// exit, as rolloutdproc runs the server.
			_, errOut, err := runExportCmd(t, []string{"GORACE=atexit_sleep_ms=0"}, args...)
			if (err == nil) != tc.ok {
				t.Errorf("export %q: exit %v, want success %v\n%s", tc.args, err, tc.ok, errOut)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("export %q: stderr lacks %q:\n%s", tc.args, w, errOut)
				}
			}
		}
	}
	didYouMean := `rolloutd: export: no shard under prefix "de": prefixes are whole segments; did you mean "delta" or "demo"?`
	check([]string{"--store", data}, []selectionCase{
		{nil, []string{"exported 4 records from 4 shards in "}, true},
		{[]string{"--prefix", ""}, []string{"exported 4 records from 4 shards in "}, true},
		{[]string{"--prefix", "demo"}, []string{"exported 3 records from 2 shards in 2 parts"}, true},
		{[]string{"--prefix", "empty"}, []string{"exported 0 records from 1 shard in 0 parts", "shards: 1 up_to_date"}, true},
		{[]string{"--prefix", "de"}, []string{didYouMean}, false},
		{[]string{"--prefix", "demo/c"}, []string{`no shard under prefix "demo/c"; the closest prefixes that exist: "demo/a", "demo/b"`}, false},
		{[]string{"--prefix", "*"}, []string{"'*' is not a prefix; omit --prefix to export every shard"}, false},
	})
	p := start(t, nil, "--store", data)
	check([]string{"--server", p.GRPCAddr}, []selectionCase{
		{[]string{"--shard", "demo/a"}, []string{"exported 2 records from 1 shard in 1 part "}, true},
		{[]string{"--shard", "empty"}, []string{"exported 0 records from 1 shard in 0 parts"}, true},
		{[]string{"--prefix", "demo"}, []string{"exported 3 records from 2 shards"}, true},
		{[]string{"--shard", "no/such"}, []string{`no shard "no/such" (never written, or deleted and reclaimed)`}, false},
		{[]string{"--shard", "demo"}, []string{`no shard "demo"`, "select them with --prefix demo"}, false},
		{[]string{"--shard", "demo/a", "--prefix", "mine"}, []string{`--shard "demo/a" is not under --prefix "mine"`}, false},
		{[]string{"--prefix", "de"}, []string{didYouMean}, false},
		{[]string{"--prefix", "*"}, []string{"'*' is not a prefix"}, false},
	})
}
