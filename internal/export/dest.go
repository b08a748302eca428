package export

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// ErrExists: a part with the name being published is already there. The
// run that listed the parts before writing found none so far along, so
// another export is writing the same DEST.
var ErrExists = errors.New("export: part already published")

// Dest is where parts are published. Names are relative to the
// destination root and use "/".
type Dest interface {
	// List returns the names of the published parts under dir (a
	// "shard=…/" directory), without temporaries.
	List(ctx context.Context, dir string) ([]string, error)
	// Create starts a part in dir that Publish makes visible. An
	// unpublished part is never visible; what it leaves behind the next
	// List of dir cleans up.
	Create(ctx context.Context, dir string) (Part, error)
	// String names the destination in messages.
	String() string
	Close() error
}

// Part is a part being written.
type Part interface {
	io.Writer
	// Publish makes the part visible under name (in the dir it was
	// created in), create-only, once its bytes are durable; when name
	// exists it fails with ErrExists.
	Publish(ctx context.Context, name string) error
	// Discard drops an unpublished part.
	Discard()
}

// tmpPrefix starts the name of a part being written in a local
// directory. It starts with a dot and does not end in .parquet, so no
// reader's glob (**/*.parquet) picks it up.
const tmpPrefix = ".tmp-part-"

// DirDest publishes parts in a local directory: each is written to a
// temporary file beside its final name, fsynced, then linked to its name
// (link fails when the name exists, so publishing is create-only) and the
// directory fsynced.
type DirDest struct {
	root string
	lock *flock.Flock
	hook func(step string) error // tests: a kill point before each step
}

// OpenDir opens (creating it) the directory root as a destination and
// locks it against a concurrent export.
func OpenDir(root string) (*DirDest, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	l := flock.New(filepath.Join(abs, ".export.lock"))
	ok, err := l.TryLock()
	if err != nil {
		return nil, fmt.Errorf("export: lock %s: %w", l.Path(), err)
	}
	if !ok {
		return nil, fmt.Errorf("export: %s is in use by another rolloutd export (it holds %s)", abs, l.Path())
	}
	return &DirDest{root: abs, lock: l}, nil
}

func (d *DirDest) String() string { return d.root }

// ShardDir is the directory of a shard's parts: LocalShardDir, which fits
// the file system's limit on a name.
func (d *DirDest) ShardDir(shard string) string { return LocalShardDir(shard) }

// Close releases the lock.
func (d *DirDest) Close() error { return d.lock.Unlock() }

func (d *DirDest) step(s string) error {
	if d.hook == nil {
		return nil
	}
	return d.hook(s)
}

// List lists dir's parts and removes temporaries an interrupted run left
// there (the lock says no other export is running).
func (d *DirDest) List(_ context.Context, dir string) ([]string, error) {
	full := filepath.Join(d.root, filepath.FromSlash(dir))
	ents, err := os.ReadDir(full)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("export: list %s: %w", full, err)
	}
	var names []string
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), tmpPrefix):
			if err := os.Remove(filepath.Join(full, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("export: remove an interrupted run's temporary: %w", err)
			}
		case !e.IsDir():
			names = append(names, path.Join(dir, e.Name()))
		}
	}
	return names, nil
}

// Create opens a temporary file in the part's directory.
func (d *DirDest) Create(_ context.Context, dirName string) (Part, error) {
	dir := filepath.Join(d.root, filepath.FromSlash(dirName))
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return &filePart{d: d, f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

type filePart struct {
	d *DirDest
	f *os.File
	w *bufio.Writer
}

func (p *filePart) Write(b []byte) (int, error) { return p.w.Write(b) }

func (p *filePart) Publish(_ context.Context, name string) error {
	full := filepath.Join(p.d.root, filepath.FromSlash(name))
	if err := p.w.Flush(); err != nil {
		return fmt.Errorf("export: write %s: %w", p.f.Name(), err)
	}
	if err := p.d.step("sync-temp"); err != nil {
		return err
	}
	if err := p.f.Sync(); err != nil {
		return fmt.Errorf("export: fsync %s: %w", p.f.Name(), err)
	}
	if err := p.f.Close(); err != nil {
		return fmt.Errorf("export: close %s: %w", p.f.Name(), err)
	}
	if err := p.d.step("link"); err != nil {
		return err
	}
	if err := os.Link(p.f.Name(), full); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w: %s", ErrExists, full)
		}
		return fmt.Errorf("export: publish %s: %w", full, err)
	}
	if err := p.d.step("remove-temp"); err != nil {
		return err
	}
	if err := os.Remove(p.f.Name()); err != nil {
		return fmt.Errorf("export: remove %s: %w", p.f.Name(), err)
	}
	if err := p.d.step("sync-dir"); err != nil {
		return err
	}
	return syncDir(filepath.Dir(full))
}

func (p *filePart) Discard() {
	_ = p.f.Close()
	_ = os.Remove(p.f.Name())
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("export: fsync %s: %w", dir, err)
	}
	return nil
}

// BlobDest publishes parts to a blob store (Azure: azblob://CONTAINER/
// PREFIX, through the same client code as rolloutd's store). A part is
// buffered in memory, so --rows-per-file bounds its size, and published
// by one create-only put; a put retried after a lost response carries the
// same PutID, so it cannot fail on its own first attempt.
type BlobDest struct {
	Store blob.Store
	Name  string // for messages
	// Retries bounds the attempts of a put or list that failed
	// retryably; default 5.
	Retries int
}

func (d *BlobDest) String() string { return d.Name }

// Close does nothing: the caller owns the store.
func (d *BlobDest) Close() error { return nil }

func (d *BlobDest) retries() int {
	if d.Retries <= 0 {
		return 5
	}
	return d.Retries
}

func retryable(err error) bool {
	return errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrOutcomeUnknown)
}

func pause(ctx context.Context, attempt int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		return nil
	}
}

// List lists the blobs under dir.
func (d *BlobDest) List(ctx context.Context, dir string) ([]string, error) {
	var names []string
	token := ""
	for attempt := 0; ; {
		page, err := d.Store.List(ctx, blob.ListOptions{Prefix: dir, Token: token})
		if err != nil {
			if retryable(err) && attempt < d.retries() {
				if err := pause(ctx, attempt); err != nil {
					return nil, err
				}
				attempt++
				continue
			}
			return nil, fmt.Errorf("export: list %s%s: %w", d.Name, dir, err)
		}
		for _, it := range page.Items {
			names = append(names, it.Name)
		}
		if page.Next == "" {
			return names, nil
		}
		token = page.Next
	}
}

// Create starts a part buffered in memory.
func (d *BlobDest) Create(context.Context, string) (Part, error) {
	return &blobPart{d: d}, nil
}

type blobPart struct {
	d   *BlobDest
	buf bytes.Buffer
}

func (p *blobPart) Write(b []byte) (int, error) { return p.buf.Write(b) }

func (p *blobPart) Publish(ctx context.Context, name string) error {
	var id [16]byte
	_, _ = rand.Read(id[:])
	opts := blob.PutOptions{IfNoneMatch: true, PutID: "export-" + hex.EncodeToString(id[:])}
	for attempt := 0; ; attempt++ {
		_, err := p.d.Store.Put(ctx, name, p.buf.Bytes(), opts)
		switch {
		case err == nil:
			p.buf = bytes.Buffer{}
			return nil
		case errors.Is(err, blob.ErrConditionFailed):
			return fmt.Errorf("%w: %s%s", ErrExists, p.d.Name, name)
		case retryable(err) && attempt < p.d.retries():
			if err := pause(ctx, attempt); err != nil {
				return err
			}
		default:
			return fmt.Errorf("export: publish %s%s: %w", p.d.Name, name, err)
		}
	}
}

func (p *blobPart) Discard() { p.buf = bytes.Buffer{} }
