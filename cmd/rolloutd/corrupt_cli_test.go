package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// Attack 7 of docs/security.md: one corrupt manifest (10 bytes) under a
// prefix. admin list --summary, admin purge, export --server and export
// --store each name the corrupt shard with its error, go on with the
// others, and exit 1. Before, the first three failed INTERNAL (DATA_LOSS)
// for every shard and export --store failed its whole listing.
func TestCorruptShardCLI(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	ls, err := localstore.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Put(ctx, format.ManifestName("exp/bad"), []byte("0123456789"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ls.Close(); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--store", data)
	for _, s := range []string{"exp/a", "exp/c"} {
		if _, err := appendOne(ctx, p.Client, s, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	admin := func(args ...string) (string, string, error) {
		var out, errOut strings.Builder
		err := run(append([]string{"admin"}, append(args, "--addr", p.GRPCAddr)...), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	out, errOut, err := admin("list", "--prefix", "exp", "--summary")
	if err == nil || strings.Count(out, "live") != 2 || !strings.Contains(out, "unreadable") || !strings.Contains(errOut, "list: exp/bad: DataLoss") {
		t.Fatalf("admin list --summary = %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, errOut, err = admin("purge", "--prefix", "exp", "--older-than", "1ms")
	if err == nil || !strings.Contains(out, "3 shards examined, 2 deleted") || !strings.Contains(out, "1 failed") || !strings.Contains(errOut, "purge: exp/bad: cannot read its summary") {
		t.Fatalf("admin purge = %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	// New shards for the exports (the purge deleted the others).
	for _, s := range []string{"exp/d", "exp/e"} {
		if _, err := appendOne(ctx, p.Client, s, "r1"); err != nil {
			t.Fatal(err)
		}
	}
	_, errOut, err = runExportCmd(t, nil, "--server", p.GRPCAddr, "--prefix", "exp/", "--out", t.TempDir())
	if err == nil || !strings.Contains(errOut, "exp/bad: FAILED") || !strings.Contains(errOut, "exported 2 records") {
		t.Fatalf("export --server = %v\n%s", err, errOut)
	}
	if code, _ := p.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("rolloutd exited %d", code)
	}
	_, errOut, err = runExportCmd(t, nil, "--store", data, "--prefix", "exp/", "--out", t.TempDir())
	if err == nil || !strings.Contains(errOut, "exp/bad: FAILED") || !strings.Contains(errOut, "exported 2 records") {
		t.Fatalf("export --store = %v\n%s", err, errOut)
	}
}
