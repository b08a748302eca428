package vfs

import (
	"bytes"
	//PRUNE
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	//PRUNE
	//PRUNE
	//PRUNE
	"syscall"
	"time"
)

type memFile struct {
	fs     *MemFS
	n      *node
	name   string
	write  bool
	off    int64
	closed bool
}

func (f *memFile) Name() string { return f.name }

func (f *memFile) Read(b []byte) (int, error) {
	n, err := f.ReadAt(b, f.off)
	f.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

func (f *memFile) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, pathErr("read", f.name, fs.ErrClosed)
	}
	if f.n.dir {
		return 0, pathErr("read", f.name, syscall.EISDIR)
	}
	if len(b) == 0 {
		return 0, nil
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	n := copy(b, f.n.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	if f.closed || !f.write {
		f.fs.mu.Unlock()
		return 0, pathErr("write", f.name, syscall.EBADF)
	}
	f.n.data = append(f.n.data[:f.off:f.off], b...)
	f.off += int64(len(b))
	f.n.mtime = time.Now()
	f.fs.mu.Unlock()
	f.fs.done("write", f.name)
	return len(b), nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	if f.closed {
		f.fs.mu.Unlock()
		return pathErr("sync", f.name, fs.ErrClosed)
	}
	if f.n.dir {
		f.n.syncedChildren = maps.Clone(f.n.children)
	} else {
		f.n.synced = bytes.Clone(f.n.data)
	}
	f.fs.mu.Unlock()
	f.fs.done("sync", f.name)
	return nil
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return info(filepath.Base(f.name), f.n), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return pathErr("close", f.name, fs.ErrClosed)
	}
	f.closed = true
	return nil
}

type fileInfo struct {
	name  string
	size  int64
	dir   bool
	mtime time.Time
}

func info(name string, n *node) fileInfo {
	return fileInfo{name: name, size: int64(len(n.data)), dir: n.dir, mtime: n.mtime}
}

func (i fileInfo) Name() string { return i.name }

func (i fileInfo) Size() int64 { return i.size }

func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o750
	}
	return 0o600
}

func (i fileInfo) ModTime() time.Time { return i.mtime }

func (i fileInfo) IsDir() bool { return i.dir }

func (i fileInfo) Sys() any { return nil }
