package vfs

import (
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

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

func (osFS) CreateAnon(dir string) (AnonFile, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(dir, unix.O_RDWR|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		errno, _ := err.(syscall.Errno)
		return nil, anonOpenError(dir, errno)
	}
	// A second descriptor keeps the file reachable for Link after Close:
	// Close then reports what close(2) reports (NFS writes back there)
	// before the file has a name, as it does for a named temporary file.
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(fd)
		return nil, &fs.PathError{Op: "dup", Path: dir, Err: err}
	}
	name := anonName(dir)
	return &osAnon{File: os.NewFile(uintptr(fd), name), dup: dup}, nil
}

// osAnon is an O_TMPFILE file; dup is the descriptor Link goes through,
// -1 once released: the number may then belong to another file, which a
// Link through /proc/self/fd would publish under the blob's name.
type osAnon struct {
	*os.File
	dup int
}

// Link links the file through /proc/self/fd: linkat(2) with AT_EMPTY_PATH
// would need CAP_DAC_READ_SEARCH.
func (a *osAnon) Link(newname string) error {
	if a.dup < 0 {
		return &os.LinkError{Op: "link", Old: a.Name(), New: newname, Err: unix.EBADF}
	}
	proc := "/proc/self/fd/" + strconv.Itoa(a.dup)
	var err error
	for {
		err = unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, newname, unix.AT_SYMLINK_FOLLOW)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: a.Name(), New: newname, Err: err}
	}
	return nil
}

func (a *osAnon) Release() error {
	if a.dup < 0 {
		return &fs.PathError{Op: "close", Path: a.Name(), Err: unix.EBADF}
	}
	dup := a.dup
	a.dup = -1
	if err := unix.Close(dup); err != nil {
		return &fs.PathError{Op: "close", Path: a.Name(), Err: err}
	}
	return nil
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

// StartWriteBack asks the kernel to start writing f's dirty data to the
// device, without waiting (sync_file_range(2) with SYNC_FILE_RANGE_WRITE).
// It is a hint and makes nothing durable: only Sync does. It does nothing
// for a file that has no descriptor (MemFS's) and ignores errors, which the
// file's Sync reports.
func StartWriteBack(f File) {
	c, ok := f.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	})
}
