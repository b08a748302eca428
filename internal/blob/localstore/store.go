// Package localstore is rolloutd's embedded local-disk blob.Store, the
// default backend. It gives the same semantics as Azure Blob Storage for what
// rolloutd needs: create-only and ETag compare-and-swap writes, PutID
// idempotency, ranged reads and byte-wise ordered listing.
//
// Layout of a data directory:
//
//	LOCK     flock(2)ed by the one process that has the directory open
//	FORMAT   "rolloutd-localstore 1"
//	tmp/     temporary files of writes in flight; emptied by Open
//	blobs/   one file per blob, see path.go for the naming
//
// A write goes to a temporary file that is fsynced and then renamed over the
// blob's file; the containing directory is fsynced before the write is
// acknowledged. A crash therefore leaves either the old or the new version,
// never a torn one. ETags are random, never derived from time or content.
//
// The store is for one process: Open takes an exclusive lock on the
// directory, and conditional writes are serialized in memory per name.
package localstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// DefaultListMax is the page size List uses when max <= 0.
const DefaultListMax = 1000

const (
	formatFile    = "FORMAT"
	formatVersion = "rolloutd-localstore 1\n"
	lockFile      = "LOCK"
	tmpDir        = "tmp"
	blobsDir      = "blobs"
	stripes       = 64
)

// ErrLocked: the data directory is held by another process (or another
// Store in this one).
var ErrLocked = errors.New("localstore: data directory is locked")

var errInvalidName = blob.ErrInvalidName

// Store is a blob.Store on a local directory. It is safe for concurrent use.
type Store struct {
	dir      string
	blobsDir string
	tmpDir   string
	now      func() time.Time
	lock     *flock.Flock

	// closeMu is held shared by every operation and exclusively by Close,
	// so Close waits for operations in flight and the lock is released only
	// when nothing touches the directory any more.
	closeMu sync.RWMutex
	closed  bool

	seed    maphash.Seed
	stripes [stripes]sync.Mutex // serializes check-and-write per name

	// durable holds the directories whose entry in their parent is known to
	// be on stable storage (see syncParents).
	durable sync.Map // string → struct{}
}

var _ blob.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithClock sets the clock that stamps LastModified (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// Open opens (creating it if needed) the data directory dir and locks it
// against other processes. It removes temporary files left by a crash.
func Open(dir string, opts ...Option) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localstore: open %q: %w", dir, err)
	}
	s := &Store{
		dir:      abs,
		blobsDir: filepath.Join(abs, blobsDir),
		tmpDir:   filepath.Join(abs, tmpDir),
		now:      time.Now,
		seed:     maphash.MakeSeed(),
	}
	for _, o := range opts {
		o(s)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("localstore: open %q: %w", abs, err)
	}
	s.lock = flock.New(filepath.Join(abs, lockFile))
	ok, err := s.lock.TryLock()
	if err != nil {
		return nil, fmt.Errorf("localstore: open %q: lock: %w", abs, err)
	}
	if !ok {
		_ = s.lock.Close()
		return nil, fmt.Errorf("%w: %s is in use by another rolloutd process (it holds %s); stop it or choose another data directory",
			ErrLocked, abs, filepath.Join(abs, lockFile))
	}
	if err := s.init(); err != nil {
		_ = s.lock.Unlock()
		return nil, fmt.Errorf("localstore: open %q: %w", abs, err)
	}
	return s, nil
}

func (s *Store) init() error {
	switch b, err := os.ReadFile(filepath.Join(s.dir, formatFile)); {
	case err == nil && string(b) != formatVersion:
		return fmt.Errorf("unknown format %q in %s", strings.TrimSpace(string(b)), formatFile)
	case errors.Is(err, fs.ErrNotExist):
		if err := s.writeFormat(); err != nil {
			return err
		}
	case err != nil:
		return err
	}
	// Whatever is in tmp/ is a write that was never acknowledged.
	if err := os.RemoveAll(s.tmpDir); err != nil {
		return fmt.Errorf("clean %s: %w", s.tmpDir, err)
	}
	for _, d := range []string{s.tmpDir, s.blobsDir} {
		if err := os.Mkdir(d, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return syncDir(s.dir)
}

func (s *Store) writeFormat() error {
	if err := os.MkdirAll(s.tmpDir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.tmpDir, "format-*")
	if err != nil {
		return err
	}
	_, err = f.WriteString(formatVersion)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(s.dir, formatFile))
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// Close waits for operations in flight and releases the directory. Every
// later call, Close included, fails with blob.ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return fmt.Errorf("localstore: close %s: %w", s.dir, blob.ErrClosed)
	}
	s.closed = true
	if err := s.lock.Unlock(); err != nil {
		return fmt.Errorf("localstore: close %s: unlock: %w", s.dir, err)
	}
	return nil
}

// Dir returns the data directory's absolute path.
func (s *Store) Dir() string { return s.dir }

// enter starts an operation; the caller must call the returned func when done.
func (s *Store) enter(ctx context.Context, op, name string) (func(), error) {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return nil, fmt.Errorf("localstore: %s %q: %w", op, name, blob.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		s.closeMu.RUnlock()
		return nil, fmt.Errorf("localstore: %s %q: %w", op, name, err)
	}
	return s.closeMu.RUnlock, nil
}

func (s *Store) stripe(name string) *sync.Mutex {
	return &s.stripes[maphash.String(s.seed, name)%stripes]
}

func newETag() blob.ETag {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return blob.ETag(hex.EncodeToString(b[:]))
}

// openBlob opens a blob's file and decodes its header. The caller closes f.
func (s *Store) openBlob(name, path string) (f *os.File, a blob.Attrs, hlen int64, err error) {
	f, err = os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil, blob.Attrs{}, 0, blob.ErrNotFound
		}
		return nil, blob.Attrs{}, 0, err
	}
	a, hlen, err = readHeader(f)
	if err == nil && a.Name != name {
		err = fmt.Errorf("%w: %s holds %q", errCorrupt, path, a.Name)
	}
	if err != nil {
		_ = f.Close()
		return nil, blob.Attrs{}, 0, err
	}
	return f, a, hlen, nil
}

// readHeader reads the header of an open blob file and its size.
func readHeader(f *os.File) (blob.Attrs, int64, error) {
	buf := make([]byte, headerReadLen)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return blob.Attrs{}, 0, err
	}
	buf = buf[:n]
	hl, err := headerLen(buf)
	if err != nil {
		return blob.Attrs{}, 0, err
	}
	if hl > len(buf) {
		buf = make([]byte, hl)
		if _, err := f.ReadAt(buf, 0); err != nil {
			return blob.Attrs{}, 0, fmt.Errorf("%w: %v", errCorrupt, err)
		}
	}
	h, err := decodeHeader(buf)
	if err != nil {
		return blob.Attrs{}, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return blob.Attrs{}, 0, err
	}
	if fi.Size() < h.len {
		return blob.Attrs{}, 0, fmt.Errorf("%w: file shorter than its header", errCorrupt)
	}
	h.attrs.Size = fi.Size() - h.len
	return h.attrs, h.len, nil
}

// current reads a blob's attributes; ok is false when it does not exist.
func (s *Store) current(name, path string) (a blob.Attrs, ok bool, err error) {
	f, a, _, err := s.openBlob(name, path)
	if errors.Is(err, blob.ErrNotFound) {
		return blob.Attrs{}, false, nil
	}
	if err != nil {
		return blob.Attrs{}, false, err
	}
	return a, true, f.Close()
}

// Get implements blob.Store. A ranged read reads only the header and the range.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return nil, blob.Attrs{}, err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return nil, blob.Attrs{}, fmt.Errorf("localstore: get %q: negative range %d+%d", name, opts.Offset, opts.Length)
	}
	done, err := s.enter(ctx, "get", name)
	if err != nil {
		return nil, blob.Attrs{}, err
	}
	defer done()
	path, err := s.blobPath(name)
	if err != nil {
		return nil, blob.Attrs{}, err
	}
	f, a, hlen, err := s.openBlob(name, path)
	if err != nil {
		return nil, blob.Attrs{}, fmt.Errorf("localstore: get %q: %w", name, err)
	}
	defer f.Close()
	if opts.IfNoneMatch != "" && opts.IfNoneMatch == a.ETag {
		return nil, a, fmt.Errorf("localstore: get %q: %w", name, blob.ErrNotModified)
	}
	start := min(opts.Offset, a.Size)
	n := a.Size - start
	if opts.Length > 0 {
		n = min(n, opts.Length)
	}
	data := make([]byte, n)
	if _, err := f.ReadAt(data, hlen+start); err != nil {
		return nil, blob.Attrs{}, fmt.Errorf("localstore: get %q: %w", name, err)
	}
	return data, a, nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return blob.Attrs{}, err
	}
	done, err := s.enter(ctx, "head", name)
	if err != nil {
		return blob.Attrs{}, err
	}
	defer done()
	path, err := s.blobPath(name)
	if err != nil {
		return blob.Attrs{}, err
	}
	f, a, _, err := s.openBlob(name, path)
	if err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: head %q: %w", name, err)
	}
	return a, f.Close()
}

// Put implements blob.Store. The content is written and fsynced to a
// temporary file first; only the check of the condition and the rename are
// serialized per name.
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return blob.Attrs{}, err
	}
	done, err := s.enter(ctx, "put", name)
	if err != nil {
		return blob.Attrs{}, err
	}
	defer done()
	path, err := s.blobPath(name)
	if err != nil {
		return blob.Attrs{}, err
	}
	a := blob.Attrs{Name: name, Size: int64(len(data)), ETag: newETag(), PutID: opts.PutID, LastModified: s.now()}
	tmp, err := s.writeTemp(a, data)
	if err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, err)
	}
	published := false
	defer func() {
		if !published {
			_ = os.Remove(tmp)
		}
	}()
	if err := ctx.Err(); err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, err)
	}

	mu := s.stripe(name)
	mu.Lock()
	defer mu.Unlock()
	cur, exists, err := s.current(name, path)
	if err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, err)
	}
	if (opts.IfNoneMatch && exists) || (opts.IfMatch != "" && (!exists || cur.ETag != opts.IfMatch)) {
		if exists && opts.PutID != "" && cur.PutID == opts.PutID {
			return cur, nil // an earlier attempt of this put landed
		}
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, blob.ErrConditionFailed)
	}
	if err := s.publish(tmp, path); err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, err)
	}
	published = true
	return a, nil
}

// writeTemp writes header and data to a new fsynced file in tmp/.
func (s *Store) writeTemp(a blob.Attrs, data []byte) (string, error) {
	hdr, err := encodeHeader(a)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(s.tmpDir, "put-*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(hdr)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// publish renames tmp to path, creating parent directories, and makes the
// result durable. A concurrent Delete may remove an empty parent directory
// between our mkdir and rename; then we try again.
func (s *Store) publish(tmp, path string) error {
	dir := filepath.Dir(path)
	for attempt := 0; ; attempt++ {
		err := s.mkdirs(dir)
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 100 {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return s.syncParents(dir)
}

// mkdirs creates dir and its missing parents below the blob directory.
func (s *Store) mkdirs(dir string) error {
	if dir == s.blobsDir {
		return nil
	}
	err := os.Mkdir(dir, 0o750)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirs(filepath.Dir(dir)); err != nil {
			return err
		}
		err = os.Mkdir(dir, 0o750)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// syncParents makes sure that dir and its ancestors are recorded durably in
// their parents, fsyncing each parent once per directory lifetime.
//
// Invariant: a directory is in s.durable only if its entry, and those of all
// its ancestors, are on stable storage. Delete removes a directory from the
// set before removing it from disk.
func (s *Store) syncParents(dir string) error {
	var pending []string
	for d := dir; d != s.blobsDir; d = filepath.Dir(d) {
		if _, ok := s.durable.Load(d); ok {
			break
		}
		pending = append(pending, d)
	}
	for i := len(pending) - 1; i >= 0; i-- {
		if err := syncDir(filepath.Dir(pending[i])); err != nil {
			return err
		}
		s.durable.Store(pending[i], struct{}{})
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete implements blob.Store. Directories left empty are removed.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	if err := blob.ValidateName(name); err != nil {
		return err
	}
	done, err := s.enter(ctx, "delete", name)
	if err != nil {
		return err
	}
	defer done()
	path, err := s.blobPath(name)
	if err != nil {
		return err
	}
	mu := s.stripe(name)
	mu.Lock()
	cur, exists, err := s.current(name, path)
	switch {
	case err != nil:
	case !exists:
		err = blob.ErrNotFound
	case opts.IfMatch != "" && opts.IfMatch != cur.ETag:
		err = blob.ErrConditionFailed
	default:
		err = os.Remove(path)
		if err == nil {
			err = syncDir(filepath.Dir(path))
		}
	}
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("localstore: delete %q: %w", name, err)
	}
	s.prune(filepath.Dir(path))
	return nil
}

// prune removes empty directories from dir upwards. It is best effort: a
// directory that a concurrent Put fills again simply stays.
func (s *Store) prune(dir string) {
	for d := dir; d != s.blobsDir && strings.HasPrefix(d, s.blobsDir); d = filepath.Dir(d) {
		s.durable.Delete(d)
		if os.Remove(d) != nil {
			return
		}
	}
}
