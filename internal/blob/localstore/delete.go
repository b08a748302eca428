package localstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Delete implements blob.Store. Directories left empty are removed.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	path, done, err := s.begin(ctx, "delete", name)
	if err != nil {
		return err
	}
	defer done()
	return s.deleteEntered(ctx, name, path, opts)
}

// deleteEntered is Delete once the store is entered and path found.
func (s *Store) deleteEntered(ctx context.Context, name, path string, opts blob.DeleteOptions) error {
	mu := s.stripe(name)
	mu.Lock()
	removed, err := s.remove(ctx, mu, name, path, opts)
	if removed && err != nil {
		// The blob is gone for readers but may come back in a crash.
		err = s.fail("delete", name, err)
	}
	mu.Unlock()
	switch {
	case removed && err != nil:
		return err
	case err != nil:
		return fmt.Errorf("localstore: delete %q: %w", name, err)
	}
	s.prune(filepath.Dir(path))
	if ferr := s.Failed(); ferr != nil {
		return inDoubt("delete", name, ferr) // another call failed the store meanwhile
	}
	return nil
}

// remove removes the blob at path, holding mu (the name's stripe lock; it
// may release and take it again), and makes the removal durable. removed
// reports whether the blob was removed.
func (s *Store) remove(ctx context.Context, mu *sync.Mutex, name, path string, opts blob.DeleteOptions) (removed bool, err error) {
	exists := true
	var cur blob.Attrs
	// Reading the blob's header costs an open, a read and a close: only an
	// IfMatch needs its ETag, and only a version that a group in flight
	// may have published needs the wait below. Holding mu, no group
	// publishes name; one that did so before is the group in flight or has
	// its outcome.
	if opts.IfMatch != "" || s.sync.touches(name) {
		cur, exists, err = s.current(name, path)
	}
	// A version that a group in flight published is deleted only once it
	// is durable.
	for err == nil && exists && s.sync.pending(name, cur.ETag) {
		mu.Unlock()
		ok := s.sync.awaitDurable(ctx.Done(), name, cur.ETag)
		mu.Lock()
		if !ok {
			return false, fmt.Errorf("waiting for a put of it to become durable: %w", ctx.Err())
		}
		cur, exists, err = s.current(name, path)
	}
	if err == nil {
		err = s.refused("delete", name) // the group waited for may have failed the store
	}
	switch {
	case err != nil:
		return false, err
	case !exists:
		return false, blob.ErrNotFound
	case opts.IfMatch != "" && opts.IfMatch != cur.ETag:
		return false, blob.ErrConditionFailed
	}
	if err := s.unlink(path); err != nil {
		return false, err
	}
	return true, s.removalDurable(filepath.Dir(path))
}

// unlink removes the blob file at path, with blob.ErrNotFound when there
// is none. The removal is not durable yet (see removalDurable).
func (s *Store) unlink(path string) error {
	err := s.fs.Remove(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return blob.ErrNotFound
	}
	return err
}

// removalDurable returns once the removal just made in dir is durable,
// sharing the directory's fsync with concurrent deletes there (see
// removal.go).
func (s *Store) removalDurable(dir string) error {
	if s.skipRemovalBarrier {
		return nil
	}
	return s.removals.durable(dir, s.syncRemoval)
}

// syncRemoval makes the removal of an entry of dir durable. A concurrent
// Delete of the directory's last other blob may have pruned dir already:
// then the removal is durable once the pruning is, and that is made
// durable by syncing the nearest ancestor that still exists. (Deletes of
// every generation of a shard in parallel, as a purge does, meet this.)
func (s *Store) syncRemoval(dir string) error {
	err := s.syncDir(dir)
	for d := dir; errors.Is(err, fs.ErrNotExist) && d != s.blobsDir && strings.HasPrefix(d, s.blobsDir); {
		d = filepath.Dir(d)
		err = s.syncDir(d)
	}
	return err
}

// prune removes empty directories from dir upwards. It is best effort: a
// directory that a concurrent Put fills again simply stays. A directory
// that stays keeps its mark in s.durable: the collector deletes log
// positions from the directory that appends put new ones in, and dropping
// the mark made the next group sync the directory's parent as well. The
// mark of one removed goes after it: mkdirs drops it anyway when the
// directory is made again.
func (s *Store) prune(dir string) {
	for d := dir; d != s.blobsDir && strings.HasPrefix(d, s.blobsDir); d = filepath.Dir(d) {
		if s.fs.Remove(d) != nil {
			return
		}
		s.durable.Delete(d)
	}
}
