package localstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// ListDelimited implements blob.Store. It walks as List does, in byte-wise
// name order, but a directory whose name already holds the delimiter after
// the prefix is one rolled-up entry and is not descended into: listing
// shards reads one directory per shard, not every generation's header.
func (s *Store) ListDelimited(ctx context.Context, prefix, delimiter, token string, max int) (blob.DelimitedPage, error) {
	tok, err := blob.ParseDelimitedArgs(prefix, delimiter, token)
	if err != nil {
		return blob.DelimitedPage{}, err
	}
	done, err := s.enter(ctx, "list", prefix)
	if err != nil {
		return blob.DelimitedPage{}, err
	}
	defer done()
	if max <= 0 {
		max = DefaultListMax
	}
	dirPrefix := prefix[:strings.LastIndex(prefix, "/")+1]
	dir, err := s.dirPath(dirPrefix)
	if err != nil {
		return blob.DelimitedPage{}, err
	}
	w := &delimWalker{walker: walker{s: s, ctx: ctx, prefix: prefix, limit: max + 1}, delim: delimiter, tok: tok}
	if err := w.walk(dir, dirPrefix); err != nil {
		return blob.DelimitedPage{}, fmt.Errorf("localstore: list %q: %w", prefix, err)
	}
	for _, e := range w.entries {
		if !e.isPrefix && !s.sync.awaitDurable(ctx.Done(), e.attrs.Name, e.attrs.ETag) {
			return blob.DelimitedPage{}, fmt.Errorf("localstore: list %q: waiting for the put of %q to become durable: %w", prefix, e.attrs.Name, ctx.Err())
		}
	}
	if err := s.refused("list", prefix); err != nil {
		return blob.DelimitedPage{}, err
	}
	var page blob.DelimitedPage
	ents := w.entries
	if len(ents) > max {
		ents = ents[:max]
		last := ents[max-1]
		page.Next = blob.DelimitedToken{Last: last.name, IsPrefix: last.isPrefix}.Encode()
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

type delimEntry struct {
	name     string
	isPrefix bool
	attrs    blob.Attrs
}

type delimWalker struct {
	walker
	delim   string
	tok     blob.DelimitedToken
	entries []delimEntry
}

func (w *delimWalker) lastPrefix() string {
	if n := len(w.entries); n > 0 && w.entries[n-1].isPrefix {
		return w.entries[n-1].name
	}
	return ""
}

// rollUp is the rolled-up entry of key when key lies under the prefix and
// holds the delimiter after it.
func (w *delimWalker) rollUp(key string) (string, bool) {
	if !strings.HasPrefix(key, w.prefix) {
		return "", false
	}
	return blob.RollUp(w.prefix, w.delim, key)
}

func (w *delimWalker) walk(dir, namePrefix string) error {
	ents, err := w.readDir(dir, namePrefix, func(key string, isDir bool) bool {
		if !isDir {
			return w.tok.After(key)
		}
		if key < w.tok.Last && !strings.HasPrefix(w.tok.Last, key) {
			return false
		}
		return !w.tok.IsPrefix || !strings.HasPrefix(key, w.tok.Last) // else rolled up on an earlier page
	})
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
				w.entries = append(w.entries, delimEntry{name: rolled, isPrefix: true})
			}
		case e.isDir:
			if err := w.walk(e.path, e.key); err != nil {
				return err
			}
		case isPrefix:
			w.entries = append(w.entries, delimEntry{name: rolled, isPrefix: true})
		default:
			n := len(w.items)
			if err := w.add(e); err != nil {
				return err
			}
			if len(w.items) > n {
				w.entries = append(w.entries, delimEntry{name: e.key, attrs: w.items[n]})
			}
		}
		if len(w.entries) >= w.limit {
			return nil
		}
	}
	return nil
}
