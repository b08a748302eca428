package localstore

import (
	"context"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

func openOn(t *testing.T, fsys vfs.FS, opts ...Option) *Store {
	t.Helper()
	s, err := Open("/data", append([]Option{WithFS(fsys)}, opts...)...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// durableDataDir returns a strict in-memory file system on which the data
// directory /data exists, durably, as an operator made it: what the crash
// tests start from.
func durableDataDir(t *testing.T) *vfs.MemFS {
	t.Helper()
	mem := vfs.NewStrictMem()
	if err := mem.MkdirAll("/data", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncFS("/"); err != nil {
		t.Fatal(err)
	}
	return mem
}

// TestConformanceOnStrictMem runs the conformance suite on the strict
// in-memory file system the crash tests use, so that they test the store
// as it runs on disk.
func TestConformanceOnStrictMem(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return openOn(t, vfs.NewStrictMem()) })
}

func contextTODO() context.Context { return context.Background() }
