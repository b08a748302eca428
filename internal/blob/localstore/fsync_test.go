package localstore

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// syncFault fails the fsync of every file or directory its armed match
// accepts, with EIO, and fsyncs the others for real.
type syncFault struct {
	match atomic.Pointer[func(path string, isDir bool) bool]
	hits  atomic.Int64
}

// errInjected is what a failing fsync returns.
var errInjected = syscall.EIO

func (f *syncFault) arm(match func(path string, isDir bool) bool) { f.match.Store(&match) }
func (f *syncFault) disarm()                                      { f.match.Store(nil) }

func (f *syncFault) sync(file vfs.File) error {
	if m := f.match.Load(); m != nil {
		fi, err := file.Stat()
		if err != nil {
			return err
		}
		if (*m)(file.Name(), fi.IsDir()) {
			f.hits.Add(1)
			return errInjected
		}
	}
	return file.Sync()
}

// dirIs matches the directory dir.
func dirIs(dir string) func(string, bool) bool {
	return func(p string, isDir bool) bool { return isDir && p == dir }
}

func openFaulty(t *testing.T, dir string) (*Store, *syncFault) {
	t.Helper()
	f := &syncFault{}
	s, err := Open(dir, withSync(f.sync))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, f
}

func mustPath(t *testing.T, s *Store, name string) string {
	t.Helper()
	p, err := s.blobPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// wantFailed fails the test unless err says the store failed, and (for the
// call that made it fail) that its outcome is unknown; never that a retry
// would be safe.
func wantFailed(t *testing.T, what string, err error, inDoubt bool) {
	t.Helper()
	if !errors.Is(err, blob.ErrStoreFailed) {
		t.Fatalf("%s: %v, want blob.ErrStoreFailed", what, err)
	}
	if errors.Is(err, blob.ErrOutcomeUnknown) != inDoubt {
		t.Fatalf("%s: %v: matches blob.ErrOutcomeUnknown: %v, want %v", what, err, !inDoubt, inDoubt)
	}
	for _, c := range []error{blob.ErrUnavailable, blob.ErrNotFound, blob.ErrConditionFailed, blob.ErrClosed} {
		if errors.Is(err, c) {
			t.Fatalf("%s: %v also matches %v", what, err, c)
		}
	}
}

// TestVisibleChangeNotDurableFailsTheStore: when a directory fsync fails
// after a rename or unlink made a change visible, the call that hit it
// reports ErrStoreFailed and ErrOutcomeUnknown, and every later call, reads
// included, ErrStoreFailed, even once fsync works again, until a restart.
func TestVisibleChangeNotDurableFailsTheStore(t *testing.T) {
	type setup struct {
		s *Store
		f *syncFault
	}
	for _, tc := range []struct {
		name string
		// run arms the fault and makes the failing call; it returns the
		// call's error and the directory whose fsync failed.
		run func(t *testing.T, u setup) (error, string)
	}{{
		name: "put: the blob's directory after the rename",
		run: func(t *testing.T, u setup) (error, string) {
			dir := filepath.Dir(mustPath(t, u.s, "a/b/x"))
			u.f.arm(dirIs(dir))
			_, err := u.s.Put(t.Context(), "a/b/x", []byte("new"), blob.PutOptions{})
			return err, dir
		},
	}, {
		name: "put: the parent of a directory it created",
		run: func(t *testing.T, u setup) (error, string) {
			dir := filepath.Dir(filepath.Dir(mustPath(t, u.s, "a/b/new/x")))
			u.f.arm(dirIs(dir))
			_, err := u.s.Put(t.Context(), "a/b/new/x", []byte("new"), blob.PutOptions{})
			return err, dir
		},
	}, {
		name: "put: a compare-and-swap",
		run: func(t *testing.T, u setup) (error, string) {
			a, err := u.s.Head(t.Context(), "a/b/c")
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Dir(mustPath(t, u.s, "a/b/c"))
			u.f.arm(dirIs(dir))
			_, err = u.s.Put(t.Context(), "a/b/c", []byte("v2"), blob.PutOptions{IfMatch: a.ETag, PutID: "cas-2"})
			return err, dir
		},
	}, {
		name: "delete: the directory after the unlink",
		run: func(t *testing.T, u setup) (error, string) {
			dir := filepath.Dir(mustPath(t, u.s, "a/b/c"))
			u.f.arm(dirIs(dir))
			return u.s.Delete(t.Context(), "a/b/c", blob.DeleteOptions{}), dir
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, f := openFaulty(t, dir)
			ctx := t.Context()
			if _, err := s.Put(ctx, "a/b/c", []byte("v1"), blob.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.FailedC():
				t.Fatal("FailedC closed before any failure")
			default:
			}
			if err := s.Failed(); err != nil {
				t.Fatalf("Failed() before any failure = %v", err)
			}

			err, failedDir := tc.run(t, setup{s, f})
			if f.hits.Load() == 0 {
				t.Fatalf("the fault never fired (call returned %v)", err)
			}
			f.disarm()
			wantFailed(t, "the call whose fsync failed", err, true)
			for _, want := range []string{failedDir, errInjected.Error(), "restarted", "disk may be failing"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if !errors.Is(err, errInjected) {
				t.Errorf("error %v does not wrap the fsync's error", err)
			}

			ferr := s.Failed()
			wantFailed(t, "Failed()", ferr, false)
			select {
			case <-s.FailedC():
			default:
				t.Error("FailedC not closed after the store failed")
			}
			if !strings.Contains(ferr.Error(), failedDir) {
				t.Errorf("Failed() = %q, does not name %s", ferr, failedDir)
			}

			// Every later call is refused, though fsync works again.
			_, _, err = s.Get(ctx, "a/b/c", blob.GetOptions{})
			wantFailed(t, "Get", err, false)
			_, err = s.Head(ctx, "a/b/c")
			wantFailed(t, "Head", err, false)
			_, err = s.Put(ctx, "other", []byte("x"), blob.PutOptions{})
			wantFailed(t, "Put", err, false)
			err = s.Delete(ctx, "a/b/c", blob.DeleteOptions{})
			wantFailed(t, "Delete", err, false)
			_, err = s.List(ctx, blob.ListOptions{})
			wantFailed(t, "List", err, false)
			if !errors.Is(s.Failed(), blob.ErrStoreFailed) {
				t.Fatalf("Failed() = %v after more calls", s.Failed())
			}

			// A restart (Close, Open) serves what is on disk again.
			if err := s.Close(); err != nil {
				t.Fatalf("Close of a failed store: %v", err)
			}
			if !errors.Is(s.Failed(), blob.ErrStoreFailed) {
				t.Fatalf("Failed() after Close = %v", s.Failed())
			}
			s2, _ := openFaulty(t, dir)
			if err := s2.Failed(); err != nil {
				t.Fatalf("Failed() after reopening = %v", err)
			}
			if _, err := s2.List(ctx, blob.ListOptions{}); err != nil {
				t.Fatalf("List after reopening: %v", err)
			}
			if _, err := s2.Put(ctx, "other", []byte("x"), blob.PutOptions{}); err != nil {
				t.Fatalf("Put after reopening: %v", err)
			}
		})
	}
}

// TestTempFileFsyncFailureIsNotSticky: a failed fsync of the temporary file,
// before the rename, leaves nothing visible: the put fails with an ordinary
// error (known not applied), and the store carries on.
func TestTempFileFsyncFailureIsNotSticky(t *testing.T) {
	s, f := openFaulty(t, t.TempDir())
	ctx := t.Context()
	f.arm(func(p string, isDir bool) bool { return !isDir && isTemp(s, p) })
	_, err := s.Put(ctx, "a/x", []byte("data"), blob.PutOptions{IfNoneMatch: true, PutID: "p1"})
	if f.hits.Load() == 0 {
		t.Fatalf("the fault never fired (Put returned %v)", err)
	}
	f.disarm()
	if err == nil || !errors.Is(err, errInjected) {
		t.Fatalf("Put with a failing temp-file fsync: %v, want the fsync's error", err)
	}
	for _, c := range []error{blob.ErrStoreFailed, blob.ErrOutcomeUnknown, blob.ErrConditionFailed} {
		if errors.Is(err, c) {
			t.Fatalf("Put with a failing temp-file fsync: %v matches %v", err, c)
		}
	}
	if err := s.Failed(); err != nil {
		t.Fatalf("Failed() = %v, want nil: nothing was visible", err)
	}
	if _, err := s.Head(ctx, "a/x"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Head after the failed put: %v, want ErrNotFound", err)
	}
	if n := tmpFiles(t, s); n != 0 {
		t.Fatalf("tmp/ after the failed put: %d files; want none", n)
	}
	// The retry is an ordinary put.
	a, err := s.Put(ctx, "a/x", []byte("data"), blob.PutOptions{IfNoneMatch: true, PutID: "p1"})
	if err != nil {
		t.Fatalf("retried Put: %v", err)
	}
	b, got, err := s.Get(ctx, "a/x", blob.GetOptions{})
	if err != nil || string(b) != "data" || got.ETag != a.ETag {
		t.Fatalf("Get = %q %+v %v, want the retried put", b, got, err)
	}
}

// TestRetriedPutAfterFailedPublishDoesNotSucceed: a retry of a put whose
// publish failed its directory fsync finds its own put id on the blob, which
// would normally mean "landed": it must not report success, since that blob
// may not survive a crash.
func TestRetriedPutAfterFailedPublishDoesNotSucceed(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T, s *Store) blob.PutOptions
	}{
		{"create-only", func(*testing.T, *Store) blob.PutOptions {
			return blob.PutOptions{IfNoneMatch: true, PutID: "put-1"}
		}},
		{"compare-and-swap", func(t *testing.T, s *Store) blob.PutOptions {
			a, err := s.Put(t.Context(), "m/manifest", []byte("v1"), blob.PutOptions{IfNoneMatch: true, PutID: "put-0"})
			if err != nil {
				t.Fatal(err)
			}
			return blob.PutOptions{IfMatch: a.ETag, PutID: "put-1"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f := openFaulty(t, t.TempDir())
			ctx := t.Context()
			if _, err := s.Put(ctx, "m/other", []byte("x"), blob.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			opts := tc.opts(t, s)
			f.arm(dirIs(filepath.Dir(mustPath(t, s, "m/manifest"))))
			_, err := s.Put(ctx, "m/manifest", []byte("v2"), opts)
			f.disarm()
			wantFailed(t, "the put whose fsync failed", err, true)
			a, err := s.Put(ctx, "m/manifest", []byte("v2"), opts)
			if err == nil {
				t.Fatalf("retried Put reported success (%+v) for a blob whose directory fsync failed", a)
			}
			wantFailed(t, "retried Put", err, false)
		})
	}
}
