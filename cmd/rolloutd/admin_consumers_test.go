package main

import (
	"context"
	"strings"
	"testing"
)

// rolloutd admin consumers against the real binary: a consumer committed
// through the client is listed, described with its lag, reset to latest,
// to exact positions and to earliest, and deleted.
func TestAdminConsumers(t *testing.T) {
	p := start(t, nil, "--store", t.TempDir())
	ctx := context.Background()
	for _, rec := range [][2]string{{"exp/a", "r1"}, {"exp/a", "r2"}, {"exp/b", "r1"}} {
		if _, err := appendOne(ctx, p.Client, rec[0], rec[1]); err != nil {
			t.Fatal(err)
		}
	}
	admin := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		err := run(append([]string{"admin", "consumers"}, append(args, "--addr", p.GRPCAddr)...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	if out, err := admin("describe", "trainer", "--prefix", "exp"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Fatalf("describe of a consumer never committed = %q, %v", out, err)
	}
	if out, err := admin("reset", "trainer", "--prefix", "exp", "--position", "exp/a=1"); err != nil || !strings.Contains(out, "generation:  2") || !strings.Contains(out, "exp/a  1") {
		t.Fatalf("reset to a position = %q, %v", out, err)
	}
	out, err := admin("describe", "trainer", "--prefix", "exp", "--positions")
	// Lag: exp/a 2-1, exp/b 1 without a position.
	if err != nil || !strings.Contains(out, "lag records:     2") || !strings.Contains(out, "lagging shards:  2") || !strings.Contains(out, "exp/a  1") {
		t.Fatalf("describe = %q, %v", out, err)
	}
	if out, err = admin("list"); err != nil || !strings.Contains(out, "PREFIX") || !strings.Contains(out, "exp     trainer   2") {
		t.Fatalf("list = %q, %v", out, err)
	}
	if out, err = admin("reset", "trainer", "--prefix", "exp", "--to", "latest", "--json"); err != nil || !strings.Contains(out, `"generation":"3"`) || !strings.Contains(out, `"exp/a":"2"`) || !strings.Contains(out, `"exp/b":"1"`) {
		t.Fatalf("reset to latest = %q, %v", out, err)
	}
	if out, err = admin("reset", "trainer", "--prefix", "exp", "--to", "earliest"); err != nil || !strings.Contains(out, "generation:  4") || !strings.Contains(out, "shards:      0") {
		t.Fatalf("reset to earliest = %q, %v", out, err)
	}
	if out, err = admin("delete", "trainer", "--prefix", "exp"); err != nil || out != "exp:trainer: deleted\n" {
		t.Fatalf("delete = %q, %v", out, err)
	}
	if out, err = admin("list", "--prefix", "exp"); err != nil || strings.Contains(out, "trainer") {
		t.Fatalf("list after delete = %q, %v", out, err)
	}
	// Mistakes are refused before any connection.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reset", "trainer"}, "--to earliest, --to latest, or --position"},
		{[]string{"reset", "trainer", "--to", "soon"}, "want earliest or latest"},
		{[]string{"reset", "trainer", "--to", "latest", "--position", "a=1"}, "not both"},
		{[]string{"reset", "trainer", "--position", "a"}, "want SHARD=SEQ"},
		{[]string{"describe"}, "name one consumer"},
		{[]string{"describe", "Trainer"}, "NAME: must be"},
		{[]string{"list", "--prefix", "*"}, "'*' is not a prefix"},
		{[]string{"frob"}, "unknown command"},
	} {
		var out strings.Builder
		err := run(append([]string{"admin", "consumers"}, append(tc.args, "--addr", "127.0.0.1:1")...), &out, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admin consumers %q = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
