package shard

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// hookStore wraps a store so a test can act at an exact point of a put:
// delay it, or replace its response after it was applied.
type hookStore struct {
	blob.Store
	mu       sync.Mutex
	delay    time.Duration // before every put
	afterPut func(name string, attrs blob.Attrs, err error) (blob.Attrs, error)
	puts     map[string]int // by kind: "manifest" or "generation"
}

func newHookStore(inner blob.Store) *hookStore {
	return &hookStore{Store: inner, puts: map[string]int{}}
}

func (s *hookStore) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	s.mu.Lock()
	delay, hook := s.delay, s.afterPut
	kind := "generation"
	if strings.HasSuffix(name, "/_manifest") {
		kind = "manifest"
	}
	s.puts[kind]++
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return blob.Attrs{}, ctx.Err()
		}
	}
	attrs, err := s.Store.Put(ctx, name, data, opts)
	if hook != nil {
		return hook(name, attrs, err)
	}
	return attrs, err
}

func (s *hookStore) setAfterPut(f func(name string, attrs blob.Attrs, err error) (blob.Attrs, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterPut = f
}

func (s *hookStore) count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts[kind]
}
