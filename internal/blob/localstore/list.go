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
// and skips subtrees that lie wholly before the token or outside the
// prefix. With a delimiter, a directory whose name already holds it after
// the prefix is one rolled-up entry and is not descended into: listing
// shards reads one directory per shard, not every generation's header.
func (s *Store) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	tok, err := opts.ParseToken()
	if err != nil {
		return blob.ListPage{}, err
	}
	prefix := opts.Prefix
	done, err := s.enter(ctx, "list", prefix)
	if err != nil {
		return blob.ListPage{}, err
	}
	defer done()
	max := opts.Max
	if max <= 0 {
		max = DefaultListMax
	}
	dirPrefix := prefix[:strings.LastIndex(prefix, "/")+1]
	dir, err := s.dirPath(dirPrefix)
	if err != nil {
		return blob.ListPage{}, err
	}
	w := &walker{s: s, ctx: ctx, prefix: prefix, delim: opts.Delimiter, tok: tok, limit: max + 1}
	if err := w.walk(dir, dirPrefix); err != nil {
		return blob.ListPage{}, fmt.Errorf("localstore: list %q: %w", prefix, err)
	}
	for _, e := range w.entries {
		if !e.isPrefix && !s.sync.awaitDurable(ctx.Done(), e.attrs.Name, e.attrs.ETag) {
			return blob.ListPage{}, fmt.Errorf("localstore: list %q: waiting for the put of %q to become durable: %w", prefix, e.attrs.Name, ctx.Err())
		}
	}
	if err := s.refused("list", prefix); err != nil {
		return blob.ListPage{}, err
	}
	var page blob.ListPage
	ents := w.entries
	if len(ents) > max {
		ents = ents[:max]
		last := ents[max-1]
		page.Next = opts.TokenAfter(blob.DelimitedToken{Last: last.name, IsPrefix: last.isPrefix})
	}
	for _, e := range ents {
		if e.isPrefix {
			page.Prefixes = append(page.Prefixes, e.name)
		} else {
			page.Items = append(page.Items, e.attrs)
		}
	}
	return page, nil
}

type walker struct {
	s       *Store
	ctx     context.Context
	prefix  string
	delim   string
	tok     blob.DelimitedToken
	limit   int
	entries []listEntry
}

// listEntry is one entry of a page: a blob, or a rolled-up prefix.
type listEntry struct {
	name     string
	isPrefix bool
	attrs    blob.Attrs
}

type entry struct {
	key   string // full name, plus "/" for a directory
	path  string
	isDir bool
}

// walk lists dir, whose blobs all start with namePrefix, into w.entries.
func (w *walker) walk(dir, namePrefix string) error {
	ents, err := w.readDir(dir, namePrefix)
	if err != nil {
		return err
	}
	for _, e := range ents {
		rolled, isPrefix := w.rollUp(e.key)
		switch {
		case isPrefix && rolled == w.lastPrefix():
			// Listed already, with an earlier name under it.
		case e.isDir && isPrefix:
			// Everything below rolls up into one entry; it stands only
			// for a directory that still holds a blob.
			name, err := w.anyName(e.path)
			if err != nil {
				return err
			}
			if name != "" {
				w.entries = append(w.entries, listEntry{name: rolled, isPrefix: true})
			}
		case e.isDir:
			if err := w.walk(e.path, e.key); err != nil {
				return err
			}
		case isPrefix:
			w.entries = append(w.entries, listEntry{name: rolled, isPrefix: true})
		default:
			if err := w.add(e); err != nil {
				return err
			}
		}
		if len(w.entries) >= w.limit {
			return nil
		}
	}
	return nil
}

// after reports whether an entry of a directory (its key ends with "/")
// may hold a name the listing's token has not passed.
func (w *walker) after(key string, isDir bool) bool {
	if !isDir {
		return w.tok.After(key)
	}
	if key < w.tok.Last && !strings.HasPrefix(w.tok.Last, key) {
		return false // every name below sorts before the token
	}
	return !w.tok.IsPrefix || !strings.HasPrefix(key, w.tok.Last) // else rolled up on an earlier page
}

func (w *walker) lastPrefix() string {
	if n := len(w.entries); n > 0 && w.entries[n-1].isPrefix {
		return w.entries[n-1].name
	}
	return ""
}

// rollUp is the rolled-up entry of key when key lies under the prefix and
// holds the delimiter after it.
func (w *walker) rollUp(key string) (string, bool) {
	if !strings.HasPrefix(key, w.prefix) {
		return "", false
	}
	return blob.RollUp(w.prefix, w.delim, key)
}

// readDir returns the entries of dir, whose blobs all start with
// namePrefix, that may hold a name under w.prefix that the token has not
// passed, sorted by key.
func (w *walker) readDir(dir, namePrefix string) ([]entry, error) {
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
			if w.after(key, true) {
				ents = append(ents, entry{key, path, true})
			}
		} else if strings.HasPrefix(full, w.prefix) && w.after(full, false) {
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
	w.entries = append(w.entries, listEntry{name: e.key, attrs: a})
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
