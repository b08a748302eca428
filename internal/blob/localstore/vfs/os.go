package vfs

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

var _ File = (*os.File)(nil)

func (osFS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Link(oldname, newname string) error           { return os.Link(oldname, newname) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                  { return os.RemoveAll(name) }
func (osFS) Mkdir(name string, perm fs.FileMode) error    { return os.Mkdir(name, perm) }
func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }

// SyncFS calls syncfs(2) on the file system holding name. It reports
// writeback errors only since Linux 5.8.
func (osFS) SyncFS(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		err = unix.Syncfs(int(f.Fd()))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "syncfs", Path: name, Err: err}
	}
	return nil
}

func (osFS) Lock(name string) (func() error, bool, error) {
	l := flock.New(name)
	ok, err := l.TryLock()
	if err != nil || !ok {
		_ = l.Close()
		return nil, ok, err
	}
	return l.Unlock, true, nil
}

// SyncFSReportsErrors reports whether fsys's SyncFS reports write-back
// errors: for the operating system's, whether the kernel is Linux 5.8 or
// later (before, syncfs(2) returned 0 whatever happened).
func SyncFSReportsErrors(fsys FS) bool {
	switch fsys.(type) {
	case *MemFS:
		return true
	case osFS:
		var u unix.Utsname
		if unix.Uname(&u) != nil {
			return false
		}
		return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 8)
	}
	return false
}

// kernelAtLeast reports whether a release string such as "6.18.44-fc"
// names a kernel at least major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
