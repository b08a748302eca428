package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
)

// rolloutd admin against the real binary: list, describe, delete, and a
// purge by age, dry and real, then resumed.
func TestAdmin(t *testing.T) {
	p := start(t, nil, "--store", t.TempDir())
	ctx := context.Background()
	for _, s := range []string{"exp/a", "exp/b", "exp/b/c", "other"} {
		if _, err := appendOne(ctx, p.Client, s, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	admin := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		err := run(append([]string{"admin"}, append(args, "--addr", p.GRPCAddr)...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	out, err := admin("list", "--prefix", "exp")
	if err != nil || out != "exp/a\nexp/b\nexp/b/c\n" {
		t.Fatalf("admin list = %q, %v", out, err)
	}
	// Without --addr, the address comes from ROLLOUTD_ADDR.
	t.Setenv("ROLLOUTD_ADDR", p.GRPCAddr)
	var envOut strings.Builder
	if err := run([]string{"admin", "list", "--prefix", "exp"}, &envOut, io.Discard); err != nil || envOut.String() != "exp/a\nexp/b\nexp/b/c\n" {
		t.Fatalf("admin list with ROLLOUTD_ADDR = %q, %v", envOut.String(), err)
	}
	t.Setenv("ROLLOUTD_ADDR", "127.0.0.1:1") // --addr wins over it
	out, err = admin("list", "--summary")
	if err != nil || !strings.Contains(out, "LAST COMMIT") || strings.Count(out, "live") != 4 {
		t.Fatalf("admin list --summary = %q, %v", out, err)
	}
	out, err = admin("describe", "exp/a")
	if err != nil || !strings.Contains(out, "records:") || !strings.Contains(out, "last seq:        1\n") {
		t.Fatalf("admin describe = %q, %v", out, err)
	}
	if out, err = admin("delete", "other", "--expected-last-seq", "7"); err == nil || !strings.Contains(err.Error(), "SEQ_MISMATCH") {
		t.Fatalf("admin delete with a stale seq = %q, %v", out, err)
	}
	if out, err = admin("delete", "other", "--expected-last-seq", "1"); err != nil || !strings.Contains(out, "deleted 1 records through seq 1") {
		t.Fatalf("admin delete = %q, %v", out, err)
	}
	if _, err = admin("purge", "--prefix", "exp"); err == nil {
		t.Fatal("admin purge without --older-than succeeded")
	}

	c, err := client.New(p.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var buf strings.Builder
	// Nothing is an hour old yet.
	if err := adminPurge(ctx, c, &buf, io.Discard, "exp", time.Hour, false, time.Now()); err != nil || !strings.Contains(buf.String(), "3 shards examined, 0 deleted (0 records), 3 younger") {
		t.Fatalf("purge of young shards: %v\n%s", err, buf.String())
	}
	later := time.Now().Add(2 * time.Hour)
	buf.Reset()
	if err := adminPurge(ctx, c, &buf, io.Discard, "exp", time.Hour, true, later); err != nil || strings.Count(buf.String(), "would delete exp/") != 3 {
		t.Fatalf("dry-run purge: %v\n%s", err, buf.String())
	}
	if _, err := c.Get(ctx, "exp/a", "r1"); err != nil {
		t.Fatalf("the dry run deleted: %v", err)
	}
	buf.Reset()
	if err := adminPurge(ctx, c, &buf, io.Discard, "exp", time.Hour, false, later); err != nil || !strings.Contains(buf.String(), "3 deleted (3 records)") {
		t.Fatalf("purge: %v\n%s", err, buf.String())
	}
	for _, s := range []string{"exp/a", "exp/b", "exp/b/c"} {
		if _, err := c.Get(ctx, s, "r1"); !errors.Is(err, client.ErrShardDeleted) {
			t.Errorf("Get from %s after the purge: %v", s, err)
		}
	}
	buf.Reset()
	if err := adminPurge(ctx, c, &buf, io.Discard, "exp", time.Hour, false, later); err != nil || !strings.Contains(buf.String(), "0 deleted (0 records)") || !strings.Contains(buf.String(), "3 deleted before") || strings.Count(buf.String(), "resumed reclaiming exp/") != 3 {
		t.Fatalf("purge again: %v\n%s", err, buf.String())
	}
}

// A shard that purge lists deleted, and that is written again before purge
// resumes its deletion, keeps its new records: purge passes the last seq
// it listed.
func TestAdminPurgeKeepsAShardWrittenAgain(t *testing.T) {
	p := start(t, nil, "--store", t.TempDir())
	ctx := context.Background()
	c, err := client.New(p.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := appendOne(ctx, p.Client, "exp/x", "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteShard(ctx, "exp/x", nil); err != nil {
		t.Fatal(err)
	}
	purgeBeforeDelete = func(shard string) {
		if _, err := appendOne(ctx, p.Client, shard, "new"); err != nil {
			t.Errorf("append to %s before purge's delete: %v", shard, err)
		}
	}
	defer func() { purgeBeforeDelete = nil }()
	var buf strings.Builder
	if err := adminPurge(ctx, c, &buf, io.Discard, "exp", time.Hour, false, time.Now().Add(2*time.Hour)); err != nil || !strings.Contains(buf.String(), "kept exp/x") {
		t.Fatalf("purge: %v\n%s", err, buf.String())
	}
	if rec, err := c.Get(ctx, "exp/x", "new"); err != nil || rec.GetSeq() != 2 {
		t.Fatalf("the record written after the listing: %v, %v; want it kept, seq 2", rec, err)
	}
}

// Mistakes on the command line are one line on stderr, naming the fix,
// without the usage on stdout; --help prints the usage and succeeds.
func TestAdminUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // in the error; "" for success
	}{
		{[]string{"list", "--bogus"}, "flag provided but not defined: -bogus (see rolloutd admin list --help)"},
		{[]string{"describe"}, "name the shard"},
		{[]string{"describe", "a", "b"}, "takes one shard, got 2"},
		{[]string{"list", "extra"}, "takes no arguments"},
		{[]string{"delete", "x", "--expected-last-seq", "abc"}, "want a whole number"},
		{[]string{"frob"}, "unknown command"},
		{[]string{"delete", "--help"}, ""},
		// Before any connection: purge of every shard is --all, never an
		// empty or '*' prefix.
		{[]string{"purge", "--older-than", "1h"}, "--prefix P for the shards under P, or --all for every shard"},
		{[]string{"purge", "--prefix", "", "--older-than", "1h"}, "or --all for every shard"},
		{[]string{"purge", "--prefix", "*", "--older-than", "1h"}, "give --all to purge every shard"},
		{[]string{"purge", "--all", "--prefix", "x", "--older-than", "1h"}, "--all and --prefix both given"},
		{[]string{"purge", "--all"}, "--older-than is required"},
		{[]string{"list", "--prefix", "*"}, "omit --prefix to list every shard"},
		{[]string{"delete", ""}, "the shard is empty"},
	} {
		var out, errOut strings.Builder
		err := run(append([]string{"admin"}, tt.args...), &out, &errOut)
		switch {
		case tt.want == "" && (err != nil || !strings.Contains(out.String(), "Usage: rolloutd admin delete SHARD")):
			t.Errorf("admin %q = %v, stdout %q", tt.args, err, out.String())
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || out.Len() > 0):
			t.Errorf("admin %q = %v, stdout %q; want an error with %q and nothing on stdout", tt.args, err, out.String(), tt.want)
		}
	}
}

// A call's error reads as rolloutd prints it once: "rolloutd: admin
// describe x: NotFound: ...", without the client's own prefix; a delete
// that may have landed says how to finish it.
func TestAdminCallErrors(t *testing.T) {
	p := start(t, nil, "--store", t.TempDir())
	var out, errOut strings.Builder
	err := run([]string{"admin", "describe", "nope/x", "--addr", p.GRPCAddr}, &out, &errOut)
	if err == nil || !strings.HasPrefix(err.Error(), "admin describe nope/x: NotFound: ") || !errors.Is(err, client.ErrNotFound) {
		t.Errorf("admin describe of a missing shard = %v", err)
	}
	err = run([]string{"admin", "delete", "x", "--addr", "127.0.0.1:1", "--timeout", "5s"}, &out, &errOut)
	if err == nil || strings.Count(err.Error(), "rolloutd:") > 0 || !strings.Contains(err.Error(), "delete again with --expected-last-seq") {
		t.Errorf("admin delete of an unreachable server = %v", err)
	}
}

// TestAdminSelection: admin's --prefix is whole segments, as export's;
// a prefix that only a string prefix would have matched is an error
// naming the segments it may mean; purge needs --all for every shard, and
// neither an empty --prefix nor '*' stands for it.
func TestAdminSelection(t *testing.T) {
	p := start(t, nil, "--store", t.TempDir())
	ctx := context.Background()
	for _, s := range []string{"demo/a", "demo/b"} {
		if _, err := appendOne(ctx, p.Client, s, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []selectionCase{
		{[]string{"list", "--prefix", "demo"}, []string{"demo/a\ndemo/b\n"}, true},
		{[]string{"list", "--prefix", "de"}, []string{`admin list: no shard under prefix "de": prefixes are whole segments; did you mean "demo"?`}, false},
		{[]string{"list", "--prefix", "*"}, []string{"'*' is not a prefix; omit --prefix to list every shard"}, false},
		{[]string{"purge", "--prefix", "de", "--older-than", "1h"}, []string{`admin purge: no shard under prefix "de": prefixes are whole segments; did you mean "demo"?`}, false},
		{[]string{"purge", "--older-than", "1h"}, []string{"--prefix P", "--all"}, false},
		{[]string{"purge", "--prefix", "", "--older-than", "1h"}, []string{"--prefix P", "--all", "an empty --prefix is not every shard"}, false},
		{[]string{"purge", "--prefix", "*", "--older-than", "1h"}, []string{"'*' is not a prefix; give --all"}, false},
		{[]string{"purge", "--all", "--prefix", "demo", "--older-than", "1h"}, []string{"--all and --prefix both given"}, false},
		{[]string{"purge", "--all", "--older-than", "1h", "--dry-run"}, []string{"purge of every shard", "2 shards examined"}, true},
		{[]string{"delete", ""}, []string{"the shard is empty"}, false},
		{[]string{"describe", ""}, []string{"the shard is empty"}, false},
	} {
		var out, errOut strings.Builder
		err := run(append([]string{"admin"}, append(tc.args, "--addr", p.GRPCAddr)...), &out, &errOut)
		got := out.String() + errOut.String()
		if err != nil {
			got += err.Error()
		}
		if (err == nil) != tc.ok {
			t.Errorf("admin %q: %v, want success %v\n%s", tc.args, err, tc.ok, got)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("admin %q: %q lacks %q", tc.args, got, w)
			}
		}
	}
	c, err := client.New(p.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, s := range []string{"demo/a", "demo/b"} {
		if _, err := c.Get(ctx, s, "r1"); err != nil {
			t.Errorf("Get from %s after the refused and dry purges: %v", s, err)
		}
	}
}

// purge's summary names the age as --older-than takes it.
func TestAgeString(t *testing.T) {
	for in, want := range map[string]string{"30d": "30d", "36h": "36h", "90m": "1h30m", "1s": "1s", "1500ms": "1.5s", "48h": "2d"} {
		d, err := parseAge(in)
		if err != nil || ageString(d) != want {
			t.Errorf("ageString(parseAge(%q)) = %q, %v; want %q", in, ageString(d), err, want)
		}
	}
}

// admin's address: --addr, else ROLLOUTD_ADDR, else localhost:50051.
func TestAdminTarget(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "ROLLOUTD_ADDR" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct{ flag, env, want string }{
		{"", "", "localhost:50051"},
		{"", "rolloutd:50051", "rolloutd:50051"},
		{"h:1", "rolloutd:50051", "h:1"},
	} {
		a := adminFlags{addr: tc.flag}
		if got := a.target(env(tc.env)); got != tc.want {
			t.Errorf("--addr %q, ROLLOUTD_ADDR %q: dials %q, want %q", tc.flag, tc.env, got, tc.want)
		}
	}
}

// admin list --summary prints its header only once a page arrived: a
// connection error prints the error alone.
func TestAdminListHeaderAfterFirstPage(t *testing.T) {
	c, err := client.New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out strings.Builder
	if err := adminList(ctx, c, &out, io.Discard, "", true); err == nil || out.Len() > 0 {
		t.Errorf("admin list --summary with no server: %v, stdout %q; want an error and nothing on stdout", err, out.String())
	}
}
