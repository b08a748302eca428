package vfs

import (
	"errors"
	"io"
	"io/fs"
	"syscall"
	"testing"
)

func TestKernelAtLeast(t *testing.T) {
	for rel, want := range map[string]bool{
		"6.18.44-fc-v1045": true, "5.8.0": true, "5.10.1-generic": true, "5.7.19": false,
		"4.19.0": false, "": false, "garbage": false, "10.0": true,
	} {
		if got := kernelAtLeast(rel, 5, 8); got != want {
			t.Errorf("kernelAtLeast(%q, 5, 8) = %v, want %v", rel, got, want)
		}
	}
}

// TestAnonFile checks CreateAnon and Link on the operating system's file
// system and on the strict in-memory one alike: the file has no name until
// Link, Link works after Close and refuses an existing name, and a file
// released unlinked leaves nothing.
func TestAnonFile(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) (FS, string){
		"os":  func(t *testing.T) (FS, string) { return Default, t.TempDir() },
		"mem": func(t *testing.T) (FS, string) { m := NewStrictMem(); return m, "/d" },
	} {
		t.Run(name, func(t *testing.T) {
			fsys, dir := mk(t)
			if err := fsys.MkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			f, err := fsys.CreateAnon(dir)
			if errors.Is(err, errors.ErrUnsupported) {
				t.Skipf("no O_TMPFILE here: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if ents, _ := fsys.ReadDir(dir); len(ents) != 0 {
				t.Fatalf("before Link, %s holds %v", dir, ents)
			}
			if err := f.Link(dir + "/a"); err != nil {
				t.Fatalf("Link after Close: %v", err)
			}
			if err := f.Link(dir + "/a"); !errors.Is(err, fs.ErrExist) {
				t.Fatalf("Link to an existing name: %v, want fs.ErrExist", err)
			}
			if err := f.Release(); err != nil {
				t.Fatal(err)
			}
			r, err := fsys.Open(dir + "/a")
			if err != nil {
				t.Fatal(err)
			}
			// The lowest free numbers are f's own (closed) and the released
			// one: r and r2 likely take them, so a Link or a Release through
			// the released number now would reach r2's file.
			r2, err := fsys.Open(dir + "/a")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = r2.Close() }()
			if err := f.Link(dir + "/b"); err == nil {
				t.Fatal("Link after Release succeeded")
			}
			if err := f.Release(); err == nil {
				t.Fatal("a second Release succeeded")
			}
			b, err := io.ReadAll(r)
			_ = r.Close()
			if err != nil || string(b) != "hello" {
				t.Fatalf("linked file reads %q, %v", b, err)
			}
			g, err := fsys.CreateAnon(dir)
			if err != nil {
				t.Fatal(err)
			}
			_ = g.Close()
			if err := g.Release(); err != nil {
				t.Fatal(err)
			}
			if ents, _ := fsys.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("after releasing an unlinked file, %s holds %v", dir, ents)
			}
		})
	}
}

// TestAnonFileCrash: on the strict in-memory file system, a crash keeps an
// unnamed file only once it is linked and its directory synced, and its
// data only as synced.
func TestAnonFileCrash(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/d", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncFS("/"); err != nil {
		t.Fatal(err)
	}
	f, err := m.CreateAnon("/d")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("data"))
	if err := f.Link("/d/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CrashClone().Open("/d/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("linked but directory not synced: crash left it (%v)", err)
	}
	b, err := readAll(m.CrashCloneMetadataDurable(), "/d/a")
	if err != nil || len(b) != 0 {
		t.Fatalf("linked, data not synced, entries durable: crash left %q, %v; want an empty file", b, err)
	}
	_ = f.Sync()
	d, _ := m.Open("/d")
	_ = d.Sync()
	if b, err := readAll(m.CrashClone(), "/d/a"); err != nil || string(b) != "data" {
		t.Fatalf("synced: crash left %q, %v", b, err)
	}
}

func readAll(fsys FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestCreateAnonUnsupported: the errnos of a file system without O_TMPFILE
// match errors.ErrUnsupported, also when Faulty injects them, and others
// do not.
func TestCreateAnonUnsupported(t *testing.T) {
	for errno, want := range map[syscall.Errno]bool{
		syscall.EOPNOTSUPP: true, syscall.EISDIR: true, syscall.EINVAL: true,
		syscall.ENOSPC: false, syscall.ENOENT: false,
	} {
		f := NewFaulty(NewStrictMem())
		f.Fail(OpCreateAnon, errno)
		_, err := f.CreateAnon("/")
		if errors.Is(err, errors.ErrUnsupported) != want || !errors.Is(err, errno) {
			t.Errorf("CreateAnon failing with %v: %v; want ErrUnsupported %v", errno, err, want)
		}
	}
}

// TestSyncFSCoversAnonFiles: syncfs(2) writes back every inode of the file
// system, named or not, so a file synced by SyncFS before Link keeps its
// data once a directory fsync makes its name durable.
func TestSyncFSCoversAnonFiles(t *testing.T) {
	m := NewStrictMem()
	if err := m.MkdirAll("/d", 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := m.CreateAnon("/d")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Write([]byte("data"))
	if err := m.SyncFS("/d"); err != nil {
		t.Fatal(err)
	}
	if err := f.Link("/d/a"); err != nil {
		t.Fatal(err)
	}
	d, err := m.Open("/d")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if b, err := readAll(m.CrashClone(), "/d/a"); err != nil || string(b) != "data" {
		t.Fatalf("crash left %q, %v; want the data SyncFS made durable", b, err)
	}
	_ = f.Release()
}

// TestAnonNamesDiffer: Faulty tells files apart by name, so two unnamed
// files must not share one.
func TestAnonNamesDiffer(t *testing.T) {
	m := NewStrictMem()
	a, _ := m.CreateAnon("/")
	b, _ := m.CreateAnon("/")
	if a.Name() == b.Name() {
		t.Fatalf("two unnamed files are both called %q", a.Name())
	}
}

// TestStartWriteBack: on the disk it starts the write-back of a named and
// an unnamed file without disturbing them; on MemFS, whose files have no
// descriptor, it does nothing (what a crash keeps there is only what Sync
// made durable).
func TestStartWriteBack(t *testing.T) {
	dir := t.TempDir()
	named, err := Default.Create(dir + "/f")
	if err != nil {
		t.Fatal(err)
	}
	anon, err := Default.CreateAnon(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Release()
	for _, f := range []File{named, anon} {
		if _, err := f.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		StartWriteBack(f)
		if _, err := f.Write([]byte(" more")); err != nil {
			t.Fatalf("%s: write after StartWriteBack: %v", f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := anon.Link(dir + "/g"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir + "/f", dir + "/g"} {
		f, err := Default.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		_ = f.Close()
		if err != nil || string(b) != "data more" {
			t.Fatalf("%s holds %q, %v", p, b, err)
		}
	}

	mem := NewStrictMem()
	if err := mem.MkdirAll("/d", 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := mem.Create("/d/f")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	StartWriteBack(f)
	crashed := mem.CrashCloneMetadataDurable()
	if g, err := crashed.Open("/d/f"); err == nil {
		b, _ := io.ReadAll(g)
		if len(b) != 0 {
			t.Fatalf("MemFS kept %q of a file never synced, after StartWriteBack", b)
		}
	}
}
