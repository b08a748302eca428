// Package localstore is rolloutd's embedded local-disk blob.Store, the
// default backend. It gives the same semantics as Azure Blob Storage for what
// rolloutd needs: create-only and ETag compare-and-swap writes, PutID
// idempotency, ranged reads and byte-wise ordered listing.
//
// Layout of a data directory:
//
//	LOCK     flock(2)ed by the one process that has the directory open
//	FORMAT   "rolloutd-localstore 1"
//	tmp/     temporary files of writes in flight, in tmp/0 … tmp/15;
//	         emptied by Open
//	blobs/   one file per blob, see path.go for the naming
//
// A write goes to a temporary file that is fsynced and then renamed over the
// blob's file (or, for a create-only write, linked to its name; that file
// has no name until then, O_TMPFILE, where the file system supports it);
// the containing directory is fsynced before the write is acknowledged. A crash
// therefore leaves either the old or the new version, never a torn one.
// Concurrent writes, from any writers, are made durable in groups that
// share those fsyncs (see syncer.go); a read never reports a version whose
// group is still in flight. ETags are random, never derived from time or
// content.
//
// A failed fsync is never retried (after one, Linux may already have dropped
// the dirty pages and marked them clean, so a second fsync "succeeds"
// without writing them). Where the failure leaves nothing visible, the call
// fails with an ordinary error and the store carries on: that is the fsync
// of a temporary file before its rename, which is then removed, and those of
// Open, which fails. Where it comes after a change that reads already see (the
// directory fsyncs after a rename in Put, after the parent directories a Put
// created, after the unlink in Delete), the change may be lost in a crash
// although a reader could have seen it, and the shard layer acknowledges
// commits it reads back. So the store fails for good: that call (for a
// put, every put of its group) returns an error matching both
// blob.ErrStoreFailed and blob.ErrOutcomeUnknown, every later call, reads
// included, blob.ErrStoreFailed, until the process restarts and Open reads
// back what is really on disk. Failed reports it. A read that finds a version whose put's group is still in flight waits for the
// group's outcome, so it is refused too when that group failed; every read
// that ends after the failure was recorded is refused.
//
// Out of space (ENOSPC, EDQUOT) before a put is visible, at its temporary
// file's create, write, fsync or close (a tmpfs fails at write; ext4 may
// fail only at fsync or close) or at the mkdir, link or rename that would
// publish it, the put fails with blob.ErrNoSpace: certainly not stored,
// and the store carries on, so puts succeed again by themselves once space
// returns. A later put writes a new temporary file: a file whose fsync
// failed is never fsynced again. Out of space at a directory fsync after
// publishing is a failed store like any other error there.
//
// The store is for one process: Open takes an exclusive lock on the
// directory, and conditional writes are checked in memory, in the order the
// syncer publishes them, under a lock per name.
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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
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
	// tmpSubdirs spreads temporary files over this many directories, so
	// that concurrent writers do not all create and remove files in one
	// (measured here, 64 writers over 100 shards: 21% less CPU per append
	// at the median of 5 paired runs, lower in 4 of them).
	tmpSubdirs = 16
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
	fs       vfs.FS
	unlock   func() error
	// tmpSeq names temporary files: tmp/ is emptied by Open and the
	// directory is locked, so a counter is unique.
	tmpSeq atomic.Uint64

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

	// syncFile fsyncs a file or directory: its Sync method, replaced only
	// by tests (withSync) to inject failures.
	syncFile func(vfs.File) error
	// startWriteBack starts a written temporary file's write-back (see
	// writeTemp): vfs.StartWriteBack, replaced only by tests.
	startWriteBack func(vfs.File)
	// failure is set, once, when a change already visible could not be made
	// durable (see fail); from then on every call returns it. failed is
	// closed when it is set.
	failure atomic.Pointer[error]
	failed  chan struct{}

	// sync makes puts durable in groups (see syncer.go).
	sync *syncer
	// removals makes deletes durable in groups per directory (see
	// removal.go).
	removals removals
	barrier  Barrier
	// syncfsOK: syncfs(2) reports write-back errors on this file system.
	syncfsOK bool
	// anon: create-only puts write unnamed temporary files (see writeTemp),
	// which this file system supports (see probeAnon).
	anon    bool
	observe func(size int, elapsed time.Duration)
	// skipFileBarrier, skipDirBarrier and skipRemovalBarrier remove a
	// barrier, only for the tests that prove the crash tests catch it.
	skipFileBarrier, skipDirBarrier, skipRemovalBarrier bool
}

var _ blob.Store = (*Store)(nil)

// Option configures Open.
type Option func(*Store)

// WithClock sets the clock that stamps LastModified (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithBarrier sets how groups of puts are made durable (default
// BarrierFsync; see Barrier).
func WithBarrier(b Barrier) Option { return func(s *Store) { s.barrier = b } }

// WithGroupObserver makes the store call observe after each group of puts
// it made durable, with the number of puts and the time the group took from
// its start to its outcome. observe must be quick and safe for concurrent
// use.
func WithGroupObserver(observe func(size int, elapsed time.Duration)) Option {
	return func(s *Store) { s.observe = observe }
}

// withSync replaces the fsync of files and directories, for tests that
// inject failures.
func withSync(sync func(vfs.File) error) Option { return func(s *Store) { s.syncFile = sync } }

// withWriteBack replaces the start of a temporary file's write-back, for
// tests that observe it.
func withWriteBack(start func(vfs.File)) Option { return func(s *Store) { s.startWriteBack = start } }

// WithFS makes the store do its file operations on fsys instead of the
// operating system's: for tests, on a strict in-memory file system or one
// that injects faults (vfs.Faulty).
func WithFS(fsys vfs.FS) Option { return func(s *Store) { s.fs = fsys } }

// Open opens (creating it if needed) the data directory dir and locks it
// against other processes. It removes temporary files left by a crash.
func Open(dir string, opts ...Option) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("localstore: open %q: %w", dir, err)
	}
	s := &Store{
		dir:            abs,
		blobsDir:       filepath.Join(abs, blobsDir),
		tmpDir:         filepath.Join(abs, tmpDir),
		now:            time.Now,
		seed:           maphash.MakeSeed(),
		fs:             vfs.Default,
		syncFile:       vfs.File.Sync,
		startWriteBack: vfs.StartWriteBack,
		failed:         make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	if err := s.fs.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("localstore: open %q: %w", abs, err)
	}
	unlock, ok, err := s.fs.Lock(filepath.Join(abs, lockFile))
	if err != nil {
		return nil, fmt.Errorf("localstore: open %q: lock: %w", abs, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s is in use by another rolloutd process (it holds %s); stop it or choose another data directory",
			ErrLocked, abs, filepath.Join(abs, lockFile))
	}
	s.unlock = unlock
	if err := s.init(); err != nil {
		_ = s.unlock()
		return nil, fmt.Errorf("localstore: open %q: %w", abs, err)
	}
	s.syncfsOK = vfs.SyncFSReportsErrors(s.fs)
	s.anon = s.probeAnon()
	s.sync = newSyncer(s)
	s.sync.start()
	return s, nil
}

func (s *Store) init() error {
	switch b, err := s.readFile(filepath.Join(s.dir, formatFile)); {
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
	if err := s.fs.RemoveAll(s.tmpDir); err != nil {
		return fmt.Errorf("clean %s: %w", s.tmpDir, err)
	}
	for _, d := range []string{s.tmpDir, s.blobsDir} {
		if err := s.fs.Mkdir(d, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return s.syncDir(s.dir)
}

func (s *Store) readFile(name string) ([]byte, error) {
	f, err := s.fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// probeAnon reports whether unnamed temporary files can be made and linked
// here: not on file systems without O_TMPFILE (NFS, SMB volumes such as
// Azure Files), nor where /proc is missing. Whatever fails, the answer is
// no, and puts use named temporary files, which work everywhere.
func (s *Store) probeAnon() bool {
	f, err := s.fs.CreateAnon(s.tmpDir)
	if err != nil {
		return false
	}
	defer f.Release()
	if err := f.Close(); err != nil {
		return false
	}
	name := filepath.Join(s.tmpDir, "probe-anon")
	if err := f.Link(name); err != nil {
		return false
	}
	return s.fs.Remove(name) == nil
}

// createTemp creates a new file in one of tmp/'s subdirectories, in turn,
// creating the subdirectory when missing.
func (s *Store) createTemp(prefix string) (vfs.File, error) {
	n := s.tmpSeq.Add(1)
	dir := filepath.Join(s.tmpDir, strconv.FormatUint(n%tmpSubdirs, 10))
	name := filepath.Join(dir, prefix+strconv.FormatUint(n, 10))
	f, err := s.fs.Create(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err = s.fs.Mkdir(dir, 0o750); err == nil || errors.Is(err, fs.ErrExist) {
			f, err = s.fs.Create(name)
		}
	}
	return f, err
}

func (s *Store) writeFormat() error {
	if err := s.fs.MkdirAll(s.tmpDir, 0o750); err != nil {
		return err
	}
	f, err := s.createTemp("format-")
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(formatVersion))
	if err == nil {
		err = s.syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(f.Name(), filepath.Join(s.dir, formatFile))
	}
	if err != nil {
		_ = s.fs.Remove(f.Name())
	}
	return err
}

// Close waits for operations in flight and releases the directory. Every
// later call, Close included, fails with blob.ErrClosed. A failed store
// (see Failed) closes like any other.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return fmt.Errorf("localstore: close %s: %w", s.dir, blob.ErrClosed)
	}
	s.closed = true
	s.sync.close()
	if err := s.unlock(); err != nil {
		return fmt.Errorf("localstore: close %s: unlock: %w", s.dir, err)
	}
	return nil
}

// Dir returns the data directory's absolute path.
func (s *Store) Dir() string { return s.dir }

// Barrier returns how the store makes groups durable (WithBarrier).
func (s *Store) Barrier() Barrier { return s.barrier }

// Failed returns nil while the store is healthy. Once a change that reads
// could already see failed to become durable, it returns the error, matching
// blob.ErrStoreFailed, that every call returns from then on, until the
// process restarts. It is cheap and safe to call at any time, also after
// Close, for health checks and metrics.
func (s *Store) Failed() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// FailedC returns a channel that is closed once the store has failed for
// good (see Failed), so that the process can stop and be restarted: only a
// restart reads back what is really on disk.
func (s *Store) FailedC() <-chan struct{} { return s.failed }

// refused returns the error of a call made after the store failed, or nil.
func (s *Store) refused(op, name string) error {
	if err := s.Failed(); err != nil {
		return fmt.Errorf("localstore: %s %q refused: %w", op, name, err)
	}
	return nil
}

// fail makes the store fail for good: the change that op made visible on
// name (a rename or an unlink) could not be made durable, because syncing a
// directory failed with err. The first failure is the one every later call
// reports. The returned error, for the call that hit it, matches both
// blob.ErrStoreFailed and blob.ErrOutcomeUnknown.
func (s *Store) fail(op, name string, err error) error {
	failure := fmt.Errorf("localstore %s: %s %q was made visible but could not be made durable: %w; "+
		"it could be read now yet be lost in a crash, so the store refuses every call until rolloutd "+
		"is restarted (the disk may be failing: check the kernel log): %w",
		s.dir, op, name, err, blob.ErrStoreFailed)
	if s.failure.CompareAndSwap(nil, &failure) {
		close(s.failed)
	}
	return inDoubt(op, name, failure)
}

// inDoubt is the error of a write that may have been applied when the store
// failed: the one that hit the failure, or one in flight when another did.
func inDoubt(op, name string, failure error) error {
	return fmt.Errorf("localstore: %s %q may or may not have been applied (%w): %w", op, name, blob.ErrOutcomeUnknown, failure)
}

// enter starts an operation; the caller must call the returned func when done.
func (s *Store) enter(ctx context.Context, op, name string) (func(), error) {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return nil, fmt.Errorf("localstore: %s %q: %w", op, name, blob.ErrClosed)
	}
	if err := s.refused(op, name); err != nil {
		s.closeMu.RUnlock()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		s.closeMu.RUnlock()
		return nil, fmt.Errorf("localstore: %s %q: %w", op, name, err)
	}
	return s.closeMu.RUnlock, nil
}

func (s *Store) stripe(name string) *sync.Mutex {
	return &s.stripes[s.stripeIndex(name)]
}

func newETag() blob.ETag {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return blob.ETag(hex.EncodeToString(b[:]))
}

func (s *Store) stripeIndex(name string) uint64 {
	return maphash.String(s.seed, name) % stripes
}
