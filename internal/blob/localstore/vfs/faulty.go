package vfs

import (
	"io/fs"
	"strings"
	"sync"
	"syscall"
)

// Op names a file-system operation that Faulty can fail.
type Op string

// The operations Faulty can fail. A file's Sync is OpSync for a file made
// by Create and OpSyncDir for one opened by Open (the store opens
// directories only to fsync them), since where an fsync fails decides
// what the store may say about the write.
const (
	OpCreate Op = "create"
	// OpCreateAnon fails CreateAnon only (OpCreate fails it too): with
	// EOPNOTSUPP it makes a file system that cannot make unnamed files.
	OpCreateAnon Op = "create-anon"
	OpWrite      Op = "write"
	OpSync       Op = "fsync"
	OpSyncDir    Op = "fsync-dir"
	OpClose      Op = "close"
	OpLink       Op = "link"
	OpRename     Op = "rename"
	OpMkdir      Op = "mkdir"
)

// Faulty is an FS that fails chosen operations with chosen errors, as a
// full disk (ENOSPC, EDQUOT) or a failing one (EIO) would, and otherwise
// passes them to the FS it wraps. Tests drive the store's failure paths
// with it. It is safe for concurrent use.
type Faulty struct {
	FS

	mu    sync.Mutex
	rules map[Op]faultRule
	hits  map[Op]int
	// syncFailed holds the files whose fsync failed; resynced counts the
	// later fsyncs of those same files, which can "succeed" without
	// writing what the failed one lost.
	syncFailed map[string]bool
	resynced   int
}

type faultRule struct {
	errno syscall.Errno
	// under, when set, limits the rule to paths containing it.
	under string
}

// NewFaulty wraps fsys with no faults set.
func NewFaulty(fsys FS) *Faulty {
	return &Faulty{FS: fsys, rules: map[Op]faultRule{}, hits: map[Op]int{}, syncFailed: map[string]bool{}}
}

// Fail makes every later op fail with errno, without effect, until Clear.
// For OpWrite the write writes nothing.
func (f *Faulty) Fail(op Op, errno syscall.Errno) { f.FailUnder(op, errno, "") }

// FailUnder is Fail for the paths that contain under only.
func (f *Faulty) FailUnder(op Op, errno syscall.Errno, under string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules[op] = faultRule{errno: errno, under: under}
}

// Clear removes every fault: space came back.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.rules)
}

// Hits reports how many times op failed.
func (f *Faulty) Hits(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[op]
}

// Resynced reports how many times a file was fsynced again after its
// fsync failed: the page cache may have dropped the dirty pages and
// marked them clean, so such an fsync proves nothing.
func (f *Faulty) Resynced() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resynced
}

// noteSync records an fsync of path and whether it failed.
func (f *Faulty) noteSync(path string, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.syncFailed[path] {
		f.resynced++
	}
	if failed {
		f.syncFailed[path] = true
	}
}

// fault returns the error op on path must fail with, or nil.
func (f *Faulty) fault(op Op, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rules[op]
	if !ok || !strings.Contains(path, r.under) {
		return nil
	}
	f.hits[op]++
	return r.errno
}

// Create implements FS.
func (f *Faulty) Create(name string) (File, error) {
	if err := f.fault(OpCreate, name); err != nil {
		return nil, pathErr("open", name, err)
	}
	file, err := f.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, syncOp: OpSync}, nil
}

// CreateAnon implements FS.
func (f *Faulty) CreateAnon(dir string) (AnonFile, error) {
	for _, op := range []Op{OpCreateAnon, OpCreate} {
		if err := f.fault(op, dir); err != nil {
			return nil, anonOpenError(dir, err.(syscall.Errno))
		}
	}
	file, err := f.FS.CreateAnon(dir)
	if err != nil {
		return nil, err
	}
	return &faultyAnon{faultyFile: faultyFile{File: file, fs: f, syncOp: OpSync}, anon: file}, nil
}

// Open implements FS.
func (f *Faulty) Open(name string) (File, error) {
	file, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f, syncOp: OpSyncDir}, nil
}

// Link implements FS.
func (f *Faulty) Link(oldname, newname string) error {
	if err := f.fault(OpLink, newname); err != nil {
		return &linkError{op: "link", old: oldname, new: newname, err: err}
	}
	return f.FS.Link(oldname, newname)
}

// Rename implements FS.
func (f *Faulty) Rename(oldname, newname string) error {
	if err := f.fault(OpRename, newname); err != nil {
		return &linkError{op: "rename", old: oldname, new: newname, err: err}
	}
	return f.FS.Rename(oldname, newname)
}

// Mkdir implements FS.
func (f *Faulty) Mkdir(name string, perm fs.FileMode) error {
	if err := f.fault(OpMkdir, name); err != nil {
		return pathErr("mkdir", name, err)
	}
	return f.FS.Mkdir(name, perm)
}

type faultyFile struct {
	File
	fs     *Faulty
	syncOp Op
}

func (f *faultyFile) Write(b []byte) (int, error) {
	if err := f.fs.fault(OpWrite, f.Name()); err != nil {
		return 0, pathErr("write", f.Name(), err)
	}
	return f.File.Write(b)
}

func (f *faultyFile) Sync() error {
	if err := f.fs.fault(f.syncOp, f.Name()); err != nil {
		f.fs.noteSync(f.Name(), true)
		return pathErr("sync", f.Name(), err)
	}
	err := f.File.Sync()
	f.fs.noteSync(f.Name(), err != nil)
	return err
}

// Close closes the file in any case, as close(2) does, and reports the
// fault.
func (f *faultyFile) Close() error {
	err := f.File.Close()
	if ferr := f.fs.fault(OpClose, f.Name()); ferr != nil {
		return pathErr("close", f.Name(), ferr)
	}
	return err
}

type faultyAnon struct {
	faultyFile
	anon AnonFile
}

func (a *faultyAnon) Link(newname string) error {
	if err := a.fs.fault(OpLink, newname); err != nil {
		return &linkError{op: "link", old: a.Name(), new: newname, err: err}
	}
	return a.anon.Link(newname)
}

func (a *faultyAnon) Release() error { return a.anon.Release() }
