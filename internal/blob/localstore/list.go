package localstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// List implements blob.Store. Names come in byte-wise order of the full
// name, as on Azure, not in directory-walk order: "a-c" < "a.b" < "a/b" <
// "a0". The walk sorts each directory's entries by the key a file's name or
// a directory's name plus "/" would have, which yields exactly that order,
// and skips subtrees that lie wholly before the token or outside the prefix.
// The token is the last name of the previous page.
func (s *Store) List(ctx context.Context, prefix, token string, max int) (blob.ListPage, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return blob.ListPage{}, err
	}
	done, err := s.enter(ctx, "list", prefix)
	if err != nil {
		return blob.ListPage{}, err
	}
	defer done()
	if max <= 0 {
		max = DefaultListMax
	}
	dirPrefix := prefix[:strings.LastIndex(prefix, "/")+1]
	dir, err := s.dirPath(dirPrefix)
	if err != nil {
		return blob.ListPage{}, err
	}
	w := walker{s: s, ctx: ctx, prefix: prefix, token: token, limit: max + 1}
	if err := w.walk(dir, dirPrefix); err != nil {
		return blob.ListPage{}, fmt.Errorf("localstore: list %q: %w", prefix, err)
	}
	for _, it := range w.items {
		if !s.sync.awaitDurable(ctx.Done(), it.Name, it.ETag) {
			return blob.ListPage{}, fmt.Errorf("localstore: list %q: waiting for the put of %q to become durable: %w", prefix, it.Name, ctx.Err())
		}
	}
	if err := s.refused("list", prefix); err != nil {
		return blob.ListPage{}, err
	}
	var page blob.ListPage
	if len(w.items) > max {
		page.Items = w.items[:max]
		page.Next = w.items[max-1].Name
	} else {
		page.Items = w.items
	}
	return page, nil
}

type walker struct {
	s             *Store
	ctx           context.Context
	prefix, token string
	limit         int
	items         []blob.Attrs
}

type entry struct {
	key   string // full name, plus "/" for a directory
	path  string
	isDir bool
}

// walk lists dir, whose blobs all start with namePrefix, into w.items.
func (w *walker) walk(dir, namePrefix string) error {
	ents, err := w.readDir(dir, namePrefix, func(key string, isDir bool) bool {
		if isDir {
			return key >= w.token || strings.HasPrefix(w.token, key) // else every name below sorts before the token
		}
		return key > w.token
	})
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.isDir {
			if err := w.walk(e.path, e.key); err != nil {
				return err
			}
		} else if err := w.add(e); err != nil {
			return err
		}
		if len(w.items) >= w.limit {
			return nil
		}
	}
	return nil
}

// readDir returns the entries of dir, whose blobs all start with
// namePrefix, that may hold a name under w.prefix and that after accepts,
// sorted by key. after sees each entry's key (a directory's ends with "/")
// and decides from the listing's token whether it is still to come.
func (w *walker) readDir(dir, namePrefix string, after func(key string, isDir bool) bool) ([]entry, error) {
	if err := w.ctx.Err(); err != nil {
		return nil, err
	}
	des, err := w.s.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // never created, or pruned by a concurrent Delete
	}
	if err != nil {
		return nil, err
	}
	var ents []entry
	for _, de := range des {
		path := filepath.Join(dir, de.Name())
		kind, seg := parseEntry(de.Name(), de.IsDir())
		var err error
		switch kind {
		case foreign:
			continue
		case hashedFile:
			seg, err = w.segmentOfFile(path, namePrefix)
		case hashedDir:
			seg, err = w.segmentOfDir(path, namePrefix)
		}
		if err != nil {
			return nil, err
		}
		if seg == "" {
			continue
		}
		full := namePrefix + seg
		if de.IsDir() {
			key := full + "/"
			if !strings.HasPrefix(key, w.prefix) && !strings.HasPrefix(w.prefix, key) {
				continue
			}
			if after(key, true) {
				ents = append(ents, entry{key, path, true})
			}
		} else if strings.HasPrefix(full, w.prefix) && after(full, false) {
			ents = append(ents, entry{full, path, false})
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].key < ents[j].key })
	return ents, nil
}

func (w *walker) add(e entry) error {
	f, err := w.s.fs.Open(e.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted since ReadDir
	}
	if err != nil {
		return err
	}
	defer f.Close()
	a, _, err := readHeader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	if a.Name != e.key {
		return fmt.Errorf("%w: %s holds %q", errCorrupt, e.path, a.Name)
	}
	w.items = append(w.items, a)
	return nil
}

// segmentOfFile reads the last segment of a hashed file's name from its
// header ("" if the file vanished).
func (w *walker) segmentOfFile(path, namePrefix string) (string, error) {
	name, err := w.nameInFile(path)
	if err != nil || name == "" {
		return "", err
	}
	seg, ok := strings.CutPrefix(name, namePrefix)
	if !ok || strings.Contains(seg, "/") || escapeSegment(seg)+fileSuffix != filepath.Base(path) {
		return "", fmt.Errorf("%w: %s holds %q", errCorrupt, path, name)
	}
	return seg, nil
}

// segmentOfDir recovers a hashed directory's segment from the name of any
// blob below it ("" if it holds none).
func (w *walker) segmentOfDir(dir, namePrefix string) (string, error) {
	name, err := w.anyName(dir)
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(name, namePrefix)
	seg, _, _ := strings.Cut(rest, "/")
	if !ok || escapeSegment(seg) != filepath.Base(dir) {
		return "", fmt.Errorf("%w: %s holds %q", errCorrupt, dir, name)
	}
	return seg, nil
}

// anyName returns the name of the first blob found below dir, in
// lexical order of the walk, or "" if there is none.
func (w *walker) anyName(dir string) (string, error) {
	des, err := w.s.fs.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for _, d := range des {
		p := filepath.Join(dir, d.Name())
		var name string
		switch {
		case d.IsDir():
			name, err = w.anyName(p)
		case strings.HasSuffix(d.Name(), fileSuffix):
			name, err = w.nameInFile(p)
		}
		if err != nil || name != "" {
			return name, err
		}
	}
	return "", nil
}

func (w *walker) nameInFile(path string) (string, error) {
	f, err := w.s.fs.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	a, _, err := readHeader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return a.Name, nil
}
