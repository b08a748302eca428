package vfs

import (
	"bytes"
	"errors"
	//PRUNE
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// MemFS is an in-memory file system that keeps, beside what reads see, what
// a crash would leave: a file's data as of its last Sync, and a directory's
// entries as of its last Sync. Nothing else is durable, as on a strict
// reading of POSIX (and as pebble's vfs.NewStrictMem models it): fsyncing a
// file makes neither its name nor a rename of it durable, only fsyncing the
// directory does, and fsyncing a directory makes no file's data durable.
// SyncFS makes everything durable.
//
// CrashClone returns the file system a crash at that instant would leave.
// Hook, when set, runs after every operation that changes what a crash
// leaves or what reads see, so a test can take a clone at each step.
type MemFS struct {
	mu    sync.Mutex
	root  *node
	locks map[string]bool
	// anon holds the files made by CreateAnon and not yet released: no
	// directory holds them, but SyncFS makes them durable, as syncfs(2)
	// writes back every inode of the file system.
	anon map[*node]bool
	// hook runs, without mu held, after each mutating operation, with its
	// name ("create", "write", "sync", "rename", …) and path.
	hook func(op, path string)
}

type node struct {
	dir bool
	// A file's data, and its data as of its last Sync.
	data, synced []byte
	// A directory's entries, and its entries as of its last Sync.
	children, syncedChildren map[string]*node
	mtime                    time.Time
}

func newDir() *node {
	return &node{dir: true, children: map[string]*node{}, syncedChildren: map[string]*node{}, mtime: time.Now()}
}

// NewStrictMem returns an empty MemFS holding only the root directory.
func NewStrictMem() *MemFS {
	return &MemFS{root: newDir(), locks: map[string]bool{}, anon: map[*node]bool{}}
}

var _ FS = (*MemFS)(nil)

// SetHook sets the function run after every mutating operation (nil: none).
// It runs without the file system's lock held and may call CrashClone.
func (m *MemFS) SetHook(hook func(op, path string)) {
	m.mu.Lock()
	m.hook = hook
	m.mu.Unlock()
}

func (m *MemFS) done(op, path string) {
	m.mu.Lock()
	h := m.hook
	m.mu.Unlock()
	if h != nil {
		h(op, path)
	}
}

// CrashClone returns a new MemFS holding what a crash now would leave:
// every directory reached from the root through synced entries, with its
// synced entries, and every file with its synced data. Locks are not
// carried over (the crashed process held them).
func (m *MemFS) CrashClone() *MemFS { return m.crashClone(false) }

// CrashCloneMetadataDurable returns what a crash now could leave if every
// directory's entries had become durable without being synced, as a
// journal commit made for another file's fsync (or the file system's
// periodic commit) may do, but no file's data had: every directory with
// its current entries, every file with its synced data. Code that
// publishes a file (renames or links it) before its data is durable leaves
// a torn file here, even if it later syncs data and names together.
func (m *MemFS) CrashCloneMetadataDurable() *MemFS { return m.crashClone(true) }

func (m *MemFS) crashClone(metadata bool) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[*node]*node{}
	var clone func(n *node) *node
	clone = func(n *node) *node {
		if c, ok := seen[n]; ok {
			return c
		}
		c := &node{dir: n.dir, mtime: n.mtime}
		seen[n] = c
		if n.dir {
			entries := n.syncedChildren
			if metadata {
				entries = n.children
			}
			c.children = make(map[string]*node, len(entries))
			for name, child := range entries {
				c.children[name] = clone(child)
			}
			c.syncedChildren = maps.Clone(c.children)
		} else {
			c.data = bytes.Clone(n.synced)
			c.synced = bytes.Clone(n.synced)
		}
		return c
	}
	return &MemFS{root: clone(m.root), locks: map[string]bool{}, anon: map[*node]bool{}}
}

func pathErr(op, path string, err error) error { return &fs.PathError{Op: op, Path: path, Err: err} }

// split cleans an absolute path into its components.
func split(path string) ([]string, error) {
	p := filepath.Clean(path)
	if !filepath.IsAbs(p) {
		return nil, syscall.EINVAL
	}
	if p == "/" {
		return nil, nil
	}
	return strings.Split(p[1:], "/"), nil
}

// lookup finds path's node; mu must be held.
func (m *MemFS) lookup(path string) (*node, error) {
	parts, err := split(path)
	if err != nil {
		return nil, err
	}
	n := m.root
	for _, p := range parts {
		if !n.dir {
			return nil, syscall.ENOTDIR
		}
		c, ok := n.children[p]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = c
	}
	return n, nil
}

// parent finds the directory holding path, and path's last component.
func (m *MemFS) parent(path string) (*node, string, error) {
	parts, err := split(path)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", syscall.EEXIST // the root
	}
	dir, err := m.lookup("/" + strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !dir.dir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, parts[len(parts)-1], nil
}

func (m *MemFS) Create(name string) (File, error) {
	m.mu.Lock()
	dir, base, err := m.parent(name)
	if err == nil {
		if _, ok := dir.children[base]; ok {
			err = syscall.EEXIST
		}
	}
	if err != nil {
		m.mu.Unlock()
		return nil, pathErr("open", name, err)
	}
	n := &node{mtime: time.Now()}
	dir.children[base] = n
	m.mu.Unlock()
	m.done("create", name)
	return &memFile{fs: m, n: n, name: name, write: true}, nil
}

func (m *MemFS) Open(name string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &memFile{fs: m, n: n, name: name}, nil
}

func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	err := func() error {
		od, ob, err := m.parent(oldname)
		if err != nil {
			return err
		}
		n, ok := od.children[ob]
		if !ok {
			return syscall.ENOENT
		}
		nd, nb, err := m.parent(newname)
		if err != nil {
			return err
		}
		if old, ok := nd.children[nb]; ok && old.dir != n.dir {
			return syscall.EISDIR
		} else if ok && old.dir && len(old.children) > 0 {
			return syscall.ENOTEMPTY
		}
		delete(od.children, ob)
		nd.children[nb] = n
		return nil
	}()
	m.mu.Unlock()
	if err != nil {
		return &linkError{"rename", oldname, newname, err}
	}
	m.done("rename", newname)
	return nil
}

func (m *MemFS) Link(oldname, newname string) error {
	m.mu.Lock()
	n, err := m.lookup(oldname)
	if err == nil && n.dir {
		err = syscall.EPERM
	}
	if err == nil {
		err = m.linkNode(n, newname)
	}
	m.mu.Unlock()
	if err != nil {
		return &linkError{"link", oldname, newname, err}
	}
	m.done("link", newname)
	return nil
}

// linkNode gives the file n the name newname; mu must be held.
func (m *MemFS) linkNode(n *node, newname string) error {
	nd, nb, err := m.parent(newname)
	if err != nil {
		return err
	}
	if _, ok := nd.children[nb]; ok {
		return syscall.EEXIST
	}
	nd.children[nb] = n
	return nil
}

// CreateAnon makes a file that no directory holds: a crash clone, which
// walks from the root, leaves nothing of it until Link names it. Creating
// it changes neither what reads see nor what a crash leaves, so the hook
// does not run.
func (m *MemFS) CreateAnon(dir string) (AnonFile, error) {
	m.mu.Lock()
	d, err := m.lookup(dir)
	if err == nil && !d.dir {
		err = syscall.ENOTDIR
	}
	n := &node{mtime: time.Now()}
	if err == nil {
		m.anon[n] = true
	}
	m.mu.Unlock()
	if err != nil {
		errno, _ := err.(syscall.Errno)
		return nil, anonOpenError(dir, errno)
	}
	return &memAnon{memFile: memFile{fs: m, n: n, name: anonName(dir), write: true}}, nil
}

// memAnon is a file made by CreateAnon.
type memAnon struct {
	memFile
	released bool // guarded by fs.mu
}

func (a *memAnon) Link(newname string) error {
	m := a.fs
	m.mu.Lock()
	var err error = syscall.EBADF
	if !a.released {
		err = m.linkNode(a.n, newname)
	}
	m.mu.Unlock()
	if err != nil {
		return &linkError{"link", a.name, newname, err}
	}
	m.done("link", newname)
	return nil
}

func (a *memAnon) Release() error {
	a.fs.mu.Lock()
	defer a.fs.mu.Unlock()
	if a.released {
		return pathErr("close", a.name, fs.ErrClosed)
	}
	a.released = true
	delete(a.fs.anon, a.n)
	return nil
}

// linkError is os.LinkError without importing os into the model.
type linkError struct {
	op, old, new string
	err          error
}

func (e *linkError) Error() string { return e.op + " " + e.old + " " + e.new + ": " + e.err.Error() }

func (e *linkError) Unwrap() error { return e.err }

func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	err := func() error {
		dir, base, err := m.parent(name)
		if err != nil {
			return err
		}
		n, ok := dir.children[base]
		if !ok {
			return syscall.ENOENT
		}
		if n.dir && len(n.children) > 0 {
			return syscall.ENOTEMPTY
		}
		delete(dir.children, base)
		return nil
	}()
	m.mu.Unlock()
	if err != nil {
		return pathErr("remove", name, err)
	}
	m.done("remove", name)
	return nil
}

func (m *MemFS) RemoveAll(name string) error {
	m.mu.Lock()
	err := func() error {
		dir, base, err := m.parent(name)
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		delete(dir.children, base)
		return nil
	}()
	m.mu.Unlock()
	if err != nil {
		return pathErr("removeall", name, err)
	}
	m.done("removeall", name)
	return nil
}

func (m *MemFS) Mkdir(name string, _ fs.FileMode) error {
	m.mu.Lock()
	err := func() error {
		dir, base, err := m.parent(name)
		if err != nil {
			return err
		}
		if _, ok := dir.children[base]; ok {
			return syscall.EEXIST
		}
		dir.children[base] = newDir()
		return nil
	}()
	m.mu.Unlock()
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	m.done("mkdir", name)
	return nil
}

func (m *MemFS) MkdirAll(name string, perm fs.FileMode) error {
	parts, err := split(name)
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	p := ""
	for _, part := range parts {
		p += "/" + part
		m.mu.Lock()
		n, err := m.lookup(p)
		m.mu.Unlock()
		switch {
		case err == nil && n.dir:
			continue
		case err == nil:
			return pathErr("mkdir", p, syscall.ENOTDIR)
		case !errors.Is(err, syscall.ENOENT):
			return pathErr("mkdir", p, err)
		}
		if err := m.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

func (m *MemFS) ReadDir(name string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, err := m.lookup(name)
	if err == nil && !n.dir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	names := slices.Sorted(maps.Keys(n.children))
	out := make([]fs.DirEntry, len(names))
	for i, c := range names {
		out[i] = fs.FileInfoToDirEntry(info(c, n.children[c]))
	}
	return out, nil
}

// SyncFS makes everything reachable from the root durable.
func (m *MemFS) SyncFS(name string) error {
	m.mu.Lock()
	if _, err := m.lookup(name); err != nil {
		m.mu.Unlock()
		return pathErr("syncfs", name, err)
	}
	seen := map[*node]bool{}
	var sync func(n *node)
	sync = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if !n.dir {
			n.synced = bytes.Clone(n.data)
			return
		}
		n.syncedChildren = maps.Clone(n.children)
		for _, c := range n.children {
			sync(c)
		}
	}
	sync(m.root)
	for n := range m.anon {
		sync(n)
	}
	m.mu.Unlock()
	m.done("syncfs", name)
	return nil
}

func (m *MemFS) Lock(name string) (func() error, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[name] {
		return nil, false, nil
	}
	if _, err := m.lookup(filepath.Dir(name)); err != nil {
		return nil, false, pathErr("lock", name, err)
	}
	m.locks[name] = true
	return func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.locks, name)
		return nil
	}, true, nil
}
