package localstore

import (
	"errors"
	"syscall"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// want is how a put that met a fault must be reported.
type want int

const (
	// notStoredNoSpace: blob.ErrNoSpace, certainly not applied.
	notStoredNoSpace want = iota
	// notStoredOther: an ordinary error, not applied, not ErrNoSpace.
	notStoredOther
	// inDoubtFailed: published, then its directory fsync failed: outcome
	// unknown, and the store failed for good.
	inDoubtFailed
)

// TestPutFaultsAreReportedWhereTheyHappen injects ENOSPC, EDQUOT and EIO at
// each step of a put, on the strict in-memory file system: before the put
// is visible, out of space is blob.ErrNoSpace and nothing else, EIO is no
// class at all, and the store carries on, so that the same put lands once
// the fault is gone, durably, without the file whose fsync failed being
// fsynced again. After the link or rename, a failed directory fsync is
// outcome-unknown whatever its errno: never "certainly not stored".
func TestPutFaultsAreReportedWhereTheyHappen(t *testing.T) {
	for tname, temp := range map[string]Option{"unnamed temporary files": func(*Store) {}, "named": withoutAnon} {
		t.Run(tname, func(t *testing.T) { testPutFaults(t, temp) })
	}
}

func testPutFaults(t *testing.T, temp Option) {
	for _, tc := range []struct {
		name       string
		op         vfs.Op
		errno      syscall.Errno
		under      string
		createOnly bool
		want       want
	}{
		{"tmpfs full at write", vfs.OpWrite, syscall.ENOSPC, "", true, notStoredNoSpace},
		{"quota spent at write", vfs.OpWrite, syscall.EDQUOT, "", true, notStoredNoSpace},
		{"full at create", vfs.OpCreate, syscall.ENOSPC, "", true, notStoredNoSpace},
		{"ext4 full at fsync", vfs.OpSync, syscall.ENOSPC, "", true, notStoredNoSpace},
		{"ext4 full at close", vfs.OpClose, syscall.ENOSPC, "", true, notStoredNoSpace},
		{"full at link", vfs.OpLink, syscall.ENOSPC, "", true, notStoredNoSpace},
		{"full at rename", vfs.OpRename, syscall.ENOSPC, "", false, notStoredNoSpace},
		{"full at mkdir", vfs.OpMkdir, syscall.ENOSPC, "/blobs/", true, notStoredNoSpace},
		{"EIO at write", vfs.OpWrite, syscall.EIO, "", true, notStoredOther},
		{"EIO at fsync", vfs.OpSync, syscall.EIO, "", true, notStoredOther},
		{"EIO at link", vfs.OpLink, syscall.EIO, "", true, notStoredOther},
		{"full at the directory fsync after link", vfs.OpSyncDir, syscall.ENOSPC, "/blobs", true, inDoubtFailed},
		{"EIO at the directory fsync after link", vfs.OpSyncDir, syscall.EIO, "/blobs", true, inDoubtFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := durableDataDir(t)
			fsys := vfs.NewFaulty(mem)
			s := openOn(t, fsys, temp)
			ctx := contextTODO()
			old := []byte("stored before the disk filled")
			if _, err := s.Put(ctx, "a/old", old, blob.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
			opts := blob.PutOptions{PutID: "p1"}
			if tc.createOnly {
				opts.IfNoneMatch = true
			}
			fsys.FailUnder(tc.op, tc.errno, tc.under)
			_, err := s.Put(ctx, "b/new", []byte("new"), opts)
			if fsys.Hits(tc.op) == 0 {
				t.Fatalf("the fault at %s was never hit (err %v)", tc.op, err)
			}
			noSpace, unknown, failed := errors.Is(err, blob.ErrNoSpace), errors.Is(err, blob.ErrOutcomeUnknown), errors.Is(err, blob.ErrStoreFailed)
			switch tc.want {
			case notStoredNoSpace:
				if !noSpace || unknown || failed {
					t.Fatalf("Put = %v; want ErrNoSpace alone (no space %v, outcome unknown %v, store failed %v)", err, noSpace, unknown, failed)
				}
			case notStoredOther:
				if err == nil || noSpace || unknown || failed {
					t.Fatalf("Put = %v; want an unclassified error (no space %v, outcome unknown %v, store failed %v)", err, noSpace, unknown, failed)
				}
			case inDoubtFailed:
				if noSpace || !unknown || !failed {
					t.Fatalf("Put = %v; want ErrOutcomeUnknown and ErrStoreFailed, not ErrNoSpace (no space %v)", err, noSpace)
				}
				return // the store refuses every call until a restart, as documented
			}
			// Reads go on while the disk is full.
			if got, _, err := s.Get(ctx, "a/old", blob.GetOptions{}); err != nil || string(got) != string(old) {
				t.Fatalf("Get while full = %q, %v", got, err)
			}
			if _, err := s.Head(ctx, "b/new"); !errors.Is(err, blob.ErrNotFound) {
				t.Fatalf("Head of the failed put = %v, want ErrNotFound: it was certainly not stored", err)
			}
			// Space returns: the same put lands, with no reopen.
			fsys.Clear()
			if _, err := s.Put(ctx, "b/new", []byte("new"), opts); err != nil {
				t.Fatalf("Put after space returned: %v", err)
			}
			if n := fsys.Resynced(); n != 0 {
				t.Fatalf("%d fsyncs of a file whose fsync had failed", n)
			}
			// And it is durable: a crash now keeps it.
			crashed := openOn(t, mem.CrashClone())
			if got, _, err := crashed.Get(ctx, "b/new", blob.GetOptions{}); err != nil || string(got) != "new" {
				t.Fatalf("after a crash: Get = %q, %v", got, err)
			}
		})
	}
}
