package localstore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
)

func mustPut(t *testing.T, s blob.Store, name, data string, opts blob.PutOptions) blob.Attrs {
	t.Helper()
	a, err := s.Put(t.Context(), name, []byte(data), opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", name, err)
	}
	return a
}

func listAll(t *testing.T, s blob.Store, prefix string) []string {
	t.Helper()
	var out []string
	for tok := ""; ; {
		p, err := s.List(t.Context(), blob.ListOptions{Prefix: prefix, Token: tok, Max: 2})
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		for _, it := range p.Items {
			out = append(out, it.Name)
		}
		if tok = p.Next; tok == "" {
			return out
		}
	}
}

func TestReopenSeesData(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	a := mustPut(t, s, "shards/x/manifest", "m1", blob.PutOptions{IfNoneMatch: true, PutID: "claim-1"})
	mustPut(t, s, "shards/x/manifest/y", "child", blob.PutOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	h, err := s.Head(t.Context(), "shards/x/manifest")
	if err != nil {
		t.Fatal(err)
	}
	if h.ETag != a.ETag || h.PutID != "claim-1" || h.Size != 2 || !h.LastModified.Equal(a.LastModified) {
		t.Fatalf("after reopen Head = %+v, want %+v", h, a)
	}
	// The CAS chain continues across the reopen; the idempotent retry too.
	if r, err := s.Put(t.Context(), "shards/x/manifest", []byte("m1"), blob.PutOptions{IfNoneMatch: true, PutID: "claim-1"}); err != nil || r.ETag != a.ETag {
		t.Fatalf("idempotent retry after reopen = %+v, %v", r, err)
	}
	mustPut(t, s, "shards/x/manifest", "m2", blob.PutOptions{IfMatch: a.ETag})
	if got := listAll(t, s, ""); fmt.Sprint(got) != "[shards/x/manifest shards/x/manifest/y]" {
		t.Fatalf("List after reopen = %q", got)
	}
}

func TestCallsAfterClose(t *testing.T) {
	s, err := localstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "a", "x", blob.PutOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	_, _, err1 := s.Get(ctx, "a", blob.GetOptions{})
	_, err2 := s.Head(ctx, "a")
	_, err3 := s.Put(ctx, "a", nil, blob.PutOptions{})
	err4 := s.Delete(ctx, "a", blob.DeleteOptions{})
	_, err5 := s.List(ctx, blob.ListOptions{})
	err6 := s.Close()
	for i, err := range []error{err1, err2, err3, err4, err5, err6} {
		if !errors.Is(err, blob.ErrClosed) {
			t.Errorf("call %d after Close: %v, want ErrClosed", i+1, err)
		}
	}
}

// TestCloseWaitsForOperations races Close against operations: each one
// either completes or reports ErrClosed, and none touches the directory
// after Close returned (the next Open would otherwise see a half state).
func TestCloseWaitsForOperations(t *testing.T) {
	dir := t.TempDir()
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				name := fmt.Sprintf("g%d/%d", g, i)
				if _, err := s.Put(context.Background(), name, []byte(name), blob.PutOptions{IfNoneMatch: true}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for {
		if p, err := s.List(context.Background(), blob.ListOptions{}); err != nil || len(p.Items) > 50 {
			break
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, blob.ErrClosed) {
			t.Fatalf("Put racing Close: %v, want success or ErrClosed", err)
		}
	}
	s = open(t, dir)
	for _, n := range listAll(t, s, "") {
		b, _, err := s.Get(t.Context(), n, blob.GetOptions{})
		if err != nil || string(b) != n {
			t.Fatalf("Get(%q) = %q, %v", n, b, err)
		}
	}
}

func TestLeftoverTempFilesAreCleaned(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	mustPut(t, s, "keep", "k", blob.PutOptions{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash mid-put leaves a temp file (here with a complete, valid blob
	// in it: it still was never published).
	src, err := os.ReadFile(filepath.Join(dir, "blobs", "keep~b"))
	if err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, "tmp", "put-123456")
	if err := os.WriteFile(leftover, src, 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("leftover temp file still there after Open: %v", err)
	}
	if got := listAll(t, s, ""); fmt.Sprint(got) != "[keep]" {
		t.Fatalf("List = %q, want [keep]", got)
	}
}

func TestForeignFilesIgnored(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	mustPut(t, s, "p/a", "x", blob.PutOptions{})
	for _, junk := range []string{"p/README", "p/.DS_Store", "p/UPPER~b", "p/~zz~b", "p/x~y"} {
		if err := os.WriteFile(filepath.Join(dir, "blobs", junk), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "blobs", "p", "Dir"), 0o750); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, s, ""); fmt.Sprint(got) != "[p/a]" {
		t.Fatalf("List = %q, want [p/a]", got)
	}
}

func TestByteWiseListOrder(t *testing.T) {
	s := open(t, t.TempDir())
	names := []string{"a-c", "a/b", "a.b", "a0", "a", "a/b/c", "a/b-", "a/b.", "a/b0", "a~", "a%", "A", "é", "a b", "a/\u00ff"}
	for _, n := range names {
		mustPut(t, s, n, n, blob.PutOptions{})
	}
	want := append([]string{}, names...)
	sort.Strings(want)
	if got := listAll(t, s, ""); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List =\n %q\nwant\n %q", got, want)
	}
	// Every page boundary.
	for max := 1; max <= len(names); max++ {
		var got []string
		for tok := ""; ; {
			p, err := s.List(t.Context(), blob.ListOptions{Token: tok, Max: max})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				got = append(got, it.Name)
			}
			if tok = p.Next; tok == "" {
				break
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("List with max %d =\n %q\nwant\n %q", max, got, want)
		}
	}
}

func TestLongSegments(t *testing.T) {
	s := open(t, t.TempDir())
	long := strings.Repeat("L", 300) // escapes to 900 bytes: hashed on disk
	names := []string{
		long, long + "/x", long + "/y/z", long + "-", "L", "L/" + long, "M",
		strings.Repeat("l", 250), strings.Repeat("l", 250) + "/a",
	}
	for _, n := range names {
		mustPut(t, s, n, n, blob.PutOptions{IfNoneMatch: true})
	}
	want := append([]string{}, names...)
	sort.Strings(want)
	if got := listAll(t, s, ""); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List =\n %q\nwant\n %q", got, want)
	}
	if got := listAll(t, s, long+"/"); fmt.Sprint(got) != fmt.Sprint([]string{long + "/x", long + "/y/z"}) {
		t.Fatalf("List(long/) = %q", got)
	}
	for _, n := range names {
		b, _, err := s.Get(t.Context(), n, blob.GetOptions{})
		if err != nil || string(b) != n {
			t.Fatalf("Get(%q) = %q, %v", n, b, err)
		}
	}
}

// TestTraversal: no name reaches outside the data directory, whatever it
// holds. The directory sits inside a parent that must stay empty otherwise.
func TestTraversal(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	s := open(t, dir)
	ctx := t.Context()
	bad := []string{"../x", "../../etc/passwd", "a/../../x", "/etc/passwd", "..", "a/..", "./x", "a\\..\\..\\x", "a/\x00/../x"}
	for _, n := range bad {
		if _, err := s.Put(ctx, n, []byte("escape"), blob.PutOptions{}); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Put(%q): %v, want ErrInvalidName", n, err)
		}
		if _, _, err := s.Get(ctx, n, blob.GetOptions{}); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Get(%q): %v, want ErrInvalidName", n, err)
		}
		if err := s.Delete(ctx, n, blob.DeleteOptions{}); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Delete(%q): %v, want ErrInvalidName", n, err)
		}
	}
	for _, p := range []string{"../", "../x", "/", "a/../.."} {
		if _, err := s.List(ctx, blob.ListOptions{Prefix: p}); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("List(%q): %v, want ErrInvalidName", p, err)
		}
	}
	// Valid names that look like traversal are plain names inside the root.
	for _, n := range []string{"%2E%2E/x", "...", "..a/b..", "a/.../b", "%2F..%2F"} {
		mustPut(t, s, n, n, blob.PutOptions{})
	}
	ents, err := os.ReadDir(parent)
	if err != nil || len(ents) != 1 || ents[0].Name() != "data" {
		t.Fatalf("parent directory holds %v (%v), want only data/", ents, err)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("symlink %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOnDiskNames documents the layout: "x" and "x/y" coexist; case and
// non-ASCII bytes are escaped so that the layout also works on a
// case-insensitive file system.
func TestOnDiskNames(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	for _, n := range []string{"shards/x/manifest", "shards/x/manifest/y", "Case/é", "case/e"} {
		mustPut(t, s, n, n, blob.PutOptions{})
	}
	var files []string
	err := filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(filepath.Join(dir, "blobs"), p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	want := []string{"%43ase/%C3%A9~b", "case/e~b", "shards/x/manifest/y~b", "shards/x/manifest~b"}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Fatalf("files = %q, want %q", files, want)
	}
}

func TestDeletePrunesEmptyDirectories(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	mustPut(t, s, "a/b/c/d", "x", blob.PutOptions{})
	mustPut(t, s, "a/keep", "x", blob.PutOptions{})
	if err := s.Delete(t.Context(), "a/b/c/d", blob.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", "a", "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a/b still exists after its last blob was deleted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "blobs", "a", "keep~b")); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, "a/b/c/d", "y", blob.PutOptions{IfNoneMatch: true})
}

func TestUnknownFormatRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "FORMAT"), []byte("rolloutd-localstore 99\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := localstore.Open(dir); err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Fatalf("Open of a directory in an unknown format: %v", err)
	}
	// And the failed Open released the lock.
	if err := os.Remove(filepath.Join(dir, "FORMAT")); err != nil {
		t.Fatal(err)
	}
	open(t, dir)
}
