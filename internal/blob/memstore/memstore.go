// Package memstore is an in-memory blob.Store with the same semantics as the
// durable backends: create-only and ETag compare-and-swap writes, PutID
// idempotency, byte-wise ordered listing. It is meant for tests and for the
// layers above blob that want a fast, exact fake.
package memstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// DefaultListMax is the page size List uses when max <= 0.
const DefaultListMax = 1000

// Store is an in-memory blob.Store. The zero value is not usable; call New.
// It is safe for concurrent use.
type Store struct {
	now func() time.Time

	mu     sync.Mutex
	blobs  map[string]*version
	prefix string // random per store, so ETags differ across stores
	seq    uint64
}

type version struct {
	data  []byte
	attrs blob.Attrs
}

var _ blob.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	var r [6]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+)
	return &Store{
		now:    time.Now,
		blobs:  make(map[string]*version),
		prefix: hex.EncodeToString(r[:]),
	}
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return nil, blob.Attrs{}, err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return nil, blob.Attrs{}, fmt.Errorf("memstore: get %q: negative range %d+%d", name, opts.Offset, opts.Length)
	}
	if err := ctx.Err(); err != nil {
		return nil, blob.Attrs{}, fmt.Errorf("memstore: get %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.blobs[name]
	if !ok {
		return nil, blob.Attrs{}, fmt.Errorf("memstore: get %q: %w", name, blob.ErrNotFound)
	}
	if opts.IfNoneMatch != "" && opts.IfNoneMatch == v.attrs.ETag {
		return nil, v.attrs, fmt.Errorf("memstore: get %q: %w", name, blob.ErrNotModified)
	}
	size := int64(len(v.data))
	start := min(opts.Offset, size)
	end := size
	if opts.Length > 0 && opts.Length < size-start {
		end = start + opts.Length
	}
	return append([]byte{}, v.data[start:end]...), v.attrs, nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return blob.Attrs{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Attrs{}, fmt.Errorf("memstore: head %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.blobs[name]
	if !ok {
		return blob.Attrs{}, fmt.Errorf("memstore: head %q: %w", name, blob.ErrNotFound)
	}
	return v.attrs, nil
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	if err := blob.ValidateName(name); err != nil {
		return blob.Attrs{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Attrs{}, fmt.Errorf("memstore: put %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.blobs[name]
	failed := (opts.IfNoneMatch && exists) ||
		(opts.IfMatch != "" && (!exists || cur.attrs.ETag != opts.IfMatch))
	if failed {
		if exists && opts.PutID != "" && cur.attrs.PutID == opts.PutID {
			// An earlier attempt of this very put landed; its response was lost.
			return cur.attrs, nil
		}
		return blob.Attrs{}, fmt.Errorf("memstore: put %q: %w", name, blob.ErrConditionFailed)
	}
	s.seq++
	v := &version{
		data: append([]byte{}, data...),
		attrs: blob.Attrs{
			Name:         name,
			Size:         int64(len(data)),
			ETag:         blob.ETag(fmt.Sprintf("%s-%d", s.prefix, s.seq)),
			PutID:        opts.PutID,
			LastModified: s.now(),
		},
	}
	s.blobs[name] = v
	return v.attrs, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	if err := blob.ValidateName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.blobs[name]
	if !ok {
		return fmt.Errorf("memstore: delete %q: %w", name, blob.ErrNotFound)
	}
	if opts.IfMatch != "" && opts.IfMatch != cur.attrs.ETag {
		return fmt.Errorf("memstore: delete %q: %w", name, blob.ErrConditionFailed)
	}
	delete(s.blobs, name)
	return nil
}

// List implements blob.Store.
func (s *Store) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	tok, err := opts.ParseToken()
	if err != nil {
		return blob.ListPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.ListPage{}, fmt.Errorf("memstore: list %q: %w", opts.Prefix, err)
	}
	max := opts.Max
	if max <= 0 {
		max = DefaultListMax
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.blobs {
		if strings.HasPrefix(n, opts.Prefix) && tok.After(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var page blob.ListPage
	var last blob.DelimitedToken
	count := 0
	for _, n := range names {
		entry, isPrefix := blob.RollUp(opts.Prefix, opts.Delimiter, n)
		if isPrefix && last.IsPrefix && entry == last.Last {
			continue
		}
		if count == max {
			page.Next = opts.TokenAfter(last)
			break
		}
		if isPrefix {
			page.Prefixes = append(page.Prefixes, entry)
		} else {
			page.Items = append(page.Items, s.blobs[n].attrs)
		}
		last = blob.DelimitedToken{Last: entry, IsPrefix: isPrefix}
		count++
	}
	return page, nil
}
