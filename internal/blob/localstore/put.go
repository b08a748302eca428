package localstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// Put implements blob.Store. The caller writes the content to a temporary
// file; the syncer then makes it durable, checks the condition and
// publishes it, together with every other put queued meanwhile (see
// syncer.go), and answers once the result is durable.
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	path, done, err := s.begin(ctx, "put", name)
	if err != nil {
		return blob.Attrs{}, err
	}
	defer done()
	a := blob.Attrs{Name: name, Size: int64(len(data)), ETag: newETag(), PutID: opts.PutID, LastModified: s.now()}
	r := &putReq{name: name, path: path, attrs: a, opts: opts, done: make(chan struct{})}
	if err := s.writeTemp(r, data); err != nil {
		return blob.Attrs{}, notStored(name, err)
	}
	if err := ctx.Err(); err != nil {
		s.discard(r)
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, err)
	}
	s.sync.enqueue(r)
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
	}
	if s.sync.withdraw(r) {
		s.discard(r)
		return blob.Attrs{}, fmt.Errorf("localstore: put %q: %w", name, ctx.Err())
	}
	// The syncer owns r now and will finish it; its outcome is not known yet.
	return blob.Attrs{}, fmt.Errorf("localstore: put %q: gave up while the group it joined was being made durable: it may or may not be applied (%w): %w",
		name, blob.ErrOutcomeUnknown, ctx.Err())
}

// writeTemp writes r's header and data to a new temporary file, and
// leaves it open for the syncer to make durable. A create-only put's file
// has no name where the file system allows (see Store.anon): it is linked
// to the blob's name straight from there, so the put adds and removes no
// entry in tmp/, whose directory lock many writers would share, and
// unlinks nothing.
func (s *Store) writeTemp(r *putReq, data []byte) error {
	hdr, err := encodeHeader(r.attrs)
	if err != nil {
		return err
	}
	if r.opts.IfNoneMatch && s.anon {
		a, err := s.createAnon(r.path)
		if err != nil {
			return err
		}
		r.file, r.anon = a, a
	} else {
		f, err := s.createTemp("put-")
		if err != nil {
			return err
		}
		r.file, r.tmpName = f, f.Name()
	}
	// One write: the header and the content together.
	buf := make([]byte, 0, len(hdr)+len(data))
	buf = append(append(buf, hdr...), data...)
	if _, err := r.file.Write(buf); err != nil {
		s.discard(r)
		return err
	}
	// Start the write-back now, while the put waits for its group: the
	// group's fsyncs then find the data written (and, on ext4, its blocks
	// allocated in the running journal transaction) and mostly share one
	// journal commit, where otherwise each fsync wrote its file's data
	// and the group's fsyncs spread over several commits, one after the
	// other. Durability is still the syncer's fsync: this is a hint.
	s.startWriteBack(r.file)
	return nil
}

// createAnon creates an unnamed file for the blob at path: in path's own
// directory, where the file system allocates its inode near the
// directory's, else (the directory is not there yet) in tmp/.
func (s *Store) createAnon(path string) (vfs.AnonFile, error) {
	f, err := s.fs.CreateAnon(filepath.Dir(path))
	if !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	return s.fs.CreateAnon(s.tmpDir)
}

// notStored is the error of a put that failed with err before anything of
// it became visible: at the temporary file's create, write, fsync or
// close, or at the link, rename or mkdir that would publish it. Out of
// space (ENOSPC, or EDQUOT for a quota) it matches blob.ErrNoSpace, so
// that the put fails at once instead of being retried as if its outcome
// were unknown; a later put writes a new temporary file, so one that
// failed its fsync is never fsynced again and called durable. A failure
// after publishing (the directory fsync) is never this: see fail.
func notStored(name string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("localstore: put %q: out of space, not stored (%w): %w", name, blob.ErrNoSpace, err)
	}
	return fmt.Errorf("localstore: put %q: %w", name, err)
}

// discard closes and removes a put's temporary file, which was never
// published.
func (s *Store) discard(r *putReq) {
	if r.file != nil {
		_ = r.file.Close()
		r.file = nil
	}
	s.dropTemp(r)
}

// dropTemp removes a put's temporary file, closed, whether or not it was
// published: a published name keeps its own link to the data. The removal
// need not be durable: Open empties tmp/.
func (s *Store) dropTemp(r *putReq) {
	if r.anon != nil {
		_ = r.anon.Release()
		r.anon = nil
	}
	if r.tmpName != "" {
		_ = s.fs.Remove(r.tmpName)
		r.tmpName = ""
	}
}

// publishOne checks r's condition and, if it holds, publishes r's
// temporary file at r.path: by link(2) for a create-only put (linkat(2) of
// the unnamed file, see writeTemp), so that the file system refuses it too
// when the name exists, else by rename(2).
// Called by the syncer only, in queue order, after the file is durable.
//
// It sets r.res or r.err (ErrConditionFailed, or an error of notStored when
// nothing became visible) and reports whether the blob became visible.
func (s *Store) publishOne(r *putReq) (published bool) {
	mu := s.stripe(r.name)
	mu.Lock()
	defer mu.Unlock()
	defer s.dropTemp(r)
	tmp := r.tmpName
	if r.opts.IfNoneMatch {
		err := s.retryMissingDir(r.path, func() error { return s.linkTemp(r) })
		switch {
		case err == nil:
			r.res = r.attrs
			return true
		case errors.Is(err, fs.ErrExist):
			s.lostCondition(r)
		default:
			r.err = notStored(r.name, err)
		}
		return false
	}
	if r.opts.IfMatch != "" {
		cur, exists, err := s.current(r.name, r.path)
		if err != nil {
			r.err = fmt.Errorf("localstore: put %q: %w", r.name, err)
			return false
		}
		if !exists || cur.ETag != r.opts.IfMatch {
			s.lostConditionTo(r, cur, exists)
			return false
		}
	}
	if err := s.retryMissingDir(r.path, func() error { return s.fs.Rename(tmp, r.path) }); err != nil {
		r.err = notStored(r.name, err)
		return false
	}
	r.tmpName = "" // renamed: nothing left to remove
	r.res = r.attrs
	return true
}

// linkTemp links r's temporary file, named or not, to r.path.
func (s *Store) linkTemp(r *putReq) error {
	if r.anon != nil {
		return r.anon.Link(r.path)
	}
	return s.fs.Link(r.tmpName, r.path)
}

// lostCondition settles a create-only put that found the name taken.
func (s *Store) lostCondition(r *putReq) {
	cur, exists, err := s.current(r.name, r.path)
	if err != nil {
		r.err = fmt.Errorf("localstore: put %q: %w", r.name, err)
		return
	}
	s.lostConditionTo(r, cur, exists)
}

// lostConditionTo settles a put whose condition failed against cur: it
// succeeded anyway if an earlier attempt of the same put landed. That
// answer is given, like every answer of the group, only once the group is
// durable, and an earlier group's blob is durable (or the store failed),
// so no blob that may not survive a crash passes for landed.
func (s *Store) lostConditionTo(r *putReq, cur blob.Attrs, exists bool) {
	if exists && r.opts.PutID != "" && cur.PutID == r.opts.PutID {
		r.res = cur // an earlier attempt of this put landed
		return
	}
	r.err = fmt.Errorf("localstore: put %q: %w", r.name, blob.ErrConditionFailed)
}

// retryMissingDir runs op (a rename or link to path), and if path's
// directory is missing creates it and its parents and runs op again. A
// concurrent Delete may remove an empty parent between the mkdir and op;
// then it tries again.
func (s *Store) retryMissingDir(path string, op func() error) error {
	err := op()
	for attempt := 0; err != nil && errors.Is(err, fs.ErrNotExist) && attempt < 100; attempt++ {
		if err = s.mkdirs(filepath.Dir(path)); err == nil {
			err = op()
		}
	}
	return err
}

// mkdirs creates dir and its missing parents below the blob directory. A
// directory it creates is not known durable, whatever an earlier one of
// the same name was (see dirsToSync).
func (s *Store) mkdirs(dir string) error {
	if dir == s.blobsDir {
		return nil
	}
	err := s.fs.Mkdir(dir, 0o750)
	if errors.Is(err, fs.ErrNotExist) {
		if err := s.mkdirs(filepath.Dir(dir)); err != nil {
			return err
		}
		err = s.fs.Mkdir(dir, 0o750)
	}
	if err == nil {
		s.durable.Delete(dir)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// dirsToSync returns the directories to fsync so that entries just
// published in dirs are durable: each of dirs, and the parent of each
// directory on the way up that is not yet known durable (see durable),
// each once. ancestors are the directories to record as durable once
// every sync succeeded.
//
// Invariant: a directory that exists is in s.durable only if its entry,
// and those of all its ancestors, are on stable storage. Only the syncer
// creates directories (mkdirs), and it drops each one it creates from the
// set before publishing in it, so a mark left from a directory of the same
// name that Delete pruned meanwhile is never trusted.
func (s *Store) dirsToSync(dirs []string) (toSync, ancestors []string) {
	seen := map[string]bool{}
	add := func(d string) {
		if !seen[d] {
			seen[d] = true
			toSync = append(toSync, d)
		}
	}
	for _, dir := range dirs {
		add(dir)
		for d := dir; d != s.blobsDir; d = filepath.Dir(d) {
			if _, ok := s.durable.Load(d); ok {
				break
			}
			ancestors = append(ancestors, d)
			add(filepath.Dir(d))
		}
	}
	return toSync, ancestors
}

// syncDir fsyncs a directory. Its error names the directory. Any error,
// opening and closing included, means the directory's entries are not known
// to be durable.
func (s *Store) syncDir(dir string) error {
	f, err := s.fs.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync of directory %s: %w", dir, err)
	}
	err = s.syncFile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync of directory %s: %w", dir, err)
	}
	return nil
}
