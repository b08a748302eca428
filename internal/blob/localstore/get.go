package localstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// openBlob opens a blob's file and decodes its header. The caller closes f.
func (s *Store) openBlob(name, path string) (f vfs.File, a blob.Attrs, hlen int64, err error) {
	f, err = s.fs.Open(path)
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
func readHeader(f vfs.File) (blob.Attrs, int64, error) {
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

// begin starts op on the blob name: it validates the name, enters the
// store (see enter) and finds the blob's path. The caller must call done
// when the operation ends.
func (s *Store) begin(ctx context.Context, op, name string) (path string, done func(), err error) {
	if err := blob.ValidateName(name); err != nil {
		return "", nil, err
	}
	if done, err = s.enter(ctx, op, name); err != nil {
		return "", nil, err
	}
	if path, err = s.blobPath(name); err != nil {
		done()
		return "", nil, err
	}
	return path, done, nil
}

// Get implements blob.Store. A ranged read reads only the header and the range.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return nil, blob.Attrs{}, err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return nil, blob.Attrs{}, fmt.Errorf("localstore: get %q: negative range %d+%d", name, opts.Offset, opts.Length)
	}
	path, done, err := s.begin(ctx, "get", name)
	if err != nil {
		return nil, blob.Attrs{}, err
	}
	defer done()
	f, a, hlen, err := s.openBlob(name, path)
	if err != nil {
		return nil, blob.Attrs{}, fmt.Errorf("localstore: get %q: %w", name, err)
	}
	defer f.Close()
	if !s.sync.awaitDurable(ctx.Done(), name, a.ETag) {
		return nil, blob.Attrs{}, fmt.Errorf("localstore: get %q: waiting for its put to become durable: %w", name, ctx.Err())
	}
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
	// What a read returns after the store failed may not survive a crash.
	if err := s.refused("get", name); err != nil {
		return nil, blob.Attrs{}, err
	}
	return data, a, nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	path, done, err := s.begin(ctx, "head", name)
	if err != nil {
		return blob.Attrs{}, err
	}
	defer done()
	f, a, _, err := s.openBlob(name, path)
	if err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: head %q: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return blob.Attrs{}, fmt.Errorf("localstore: head %q: %w", name, err)
	}
	if !s.sync.awaitDurable(ctx.Done(), name, a.ETag) {
		return blob.Attrs{}, fmt.Errorf("localstore: head %q: waiting for its put to become durable: %w", name, ctx.Err())
	}
	if err := s.refused("head", name); err != nil {
		return blob.Attrs{}, err
	}
	return a, nil
}
