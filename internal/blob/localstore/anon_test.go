package localstore

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// withoutAnon makes the store's file system one without O_TMPFILE, as NFS
// or an Azure Files volume is: Open must find that out and fall back to
// named temporary files. It must follow WithFS.
func withoutAnon(s *Store) {
	f := vfs.NewFaulty(s.fs)
	f.Fail(vfs.OpCreateAnon, syscall.EOPNOTSUPP)
	s.fs = f
}

// TestAnonProbe: Open uses unnamed temporary files where the file system
// makes them (the disk here, and the strict in-memory file system), and
// not where it cannot.
func TestAnonProbe(t *testing.T) {
	disk, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	t.Logf("the disk here makes unnamed files: %v", disk.anon)
	if !openOn(t, vfs.NewStrictMem()).anon {
		t.Fatal("on the strict in-memory file system, the store does not use unnamed files")
	}
	s := openOn(t, vfs.NewStrictMem(), withoutAnon)
	if s.anon {
		t.Fatal("on a file system without O_TMPFILE, the store uses unnamed files")
	}
	if _, err := s.Put(contextTODO(), "a/b", []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("create-only put with named temporary files: %v", err)
	}
}

// TestCreateOnlyPutsLeaveTmpAlone: a create-only put, the commit path,
// creates and removes nothing in tmp/, whose directory lock every writer
// would share; where unnamed files are not supported, it does.
func TestCreateOnlyPutsLeaveTmpAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		inTmp bool
	}{{"unnamed", nil, false}, {"named fallback", []Option{withoutAnon}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewStrictMem()
			s := openOn(t, mem, tc.opts...)
			var ops atomic.Int64
			mem.SetHook(func(op, path string) {
				// Only entries count: writing an unnamed file takes no
				// directory lock.
				if op != "write" && op != "sync" && strings.HasPrefix(path, s.tmpDir+"/") {
					ops.Add(1)
				}
			})
			defer mem.SetHook(nil)
			for i := range 4 {
				name := fmt.Sprintf("shards/s%d/_l/%016x", i%2, i)
				if _, err := s.Put(contextTODO(), name, []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
					t.Fatal(err)
				}
			}
			if got := ops.Load() > 0; got != tc.inTmp {
				t.Fatalf("%d operations in tmp/; want some: %v", ops.Load(), tc.inTmp)
			}
		})
	}
}

// TestConformanceWithoutAnon runs the suite on the fallback's named
// temporary files. ListDelimitedManyPrefixes, 2,700 puts that test listing
// (5.3 s under -race here), lists the same on either kind of temporary
// file and runs in TestConformanceOnStrictMem: here, only with
// ROLLOUTD_LOCALSTORE_LONG=1.
func TestConformanceWithoutAnon(t *testing.T) {
	long := os.Getenv("ROLLOUTD_LOCALSTORE_LONG") != ""
	blobtest.Run(t, func(t *testing.T) blob.Store {
		if !long && strings.HasSuffix(t.Name(), "/ListDelimitedManyPrefixes") {
			t.Skip("listing does not depend on the temporary files: set ROLLOUTD_LOCALSTORE_LONG=1 (the case runs in TestConformanceOnStrictMem)")
		}
		return openOn(t, vfs.NewStrictMem(), withoutAnon)
	})
}

// TestCrashAtEveryStepWithoutAnon is TestCrashAtEveryStep on the fallback,
// with the default barrier only: how a barrier syncs does not depend on
// whether the files have names, and make test has a budget.
func TestCrashAtEveryStepWithoutAnon(t *testing.T) {
	err, steps, _ := crashViolations(t, WithBarrier(BarrierFsync), withoutAnon)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked a crash after each of %d steps", steps)
}
