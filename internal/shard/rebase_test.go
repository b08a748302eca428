package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// lateCAS holds back one manifest CAS, reports it as failed without saying
// whether it landed, and lets it land just before the next manifest CAS:
// a write delayed in the network past the writer's retry.
type lateCAS struct {
	blob.Store
	mu        sync.Mutex
	hold      bool // hold the next manifest CAS
	held      func()
	failReads bool // manifest reads fail, so the outcome stays unknown
}

func (s *lateCAS) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	if !strings.HasSuffix(name, "/_manifest") || opts.IfMatch == "" {
		return s.Store.Put(ctx, name, data, opts)
	}
	s.mu.Lock()
	if s.hold {
		s.hold = false
		data := append([]byte(nil), data...)
		s.held = func() { _, _ = s.Store.Put(context.Background(), name, data, opts) }
		s.mu.Unlock()
		return blob.Attrs{}, errors.New("test: connection reset after the request was sent")
	}
	held := s.held
	s.held = nil
	s.mu.Unlock()
	if held != nil {
		held()
	}
	return s.Store.Put(ctx, name, data, opts)
}

func (s *lateCAS) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	s.mu.Lock()
	fail := s.failReads && strings.HasSuffix(name, "/_manifest")
	s.mu.Unlock()
	if fail {
		return nil, blob.Attrs{}, errors.New("test: manifest read refused")
	}
	return s.Store.Get(ctx, name, opts)
}

// An append whose outcome was unknown is retried with the same id. The retry
// checks the manifest before the first attempt's delayed CAS lands, then
// loses its own CAS to it and is rebased: it must find the id committed by
// the first attempt instead of storing it a second time.
func TestRebasedRetryFindsTheIdsALateCASCommitted(t *testing.T) {
	s := &lateCAS{Store: memstore.New()}
	w, err := Open(context.Background(), s, "s", testOptionsV1(t))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	l := newLedger()
	rs, err := w.Append(context.Background(), entries(t, "before"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)

	s.mu.Lock()
	s.hold, s.failReads = true, true
	s.mu.Unlock()
	if _, err := w.Append(context.Background(), entries(t, "x")); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("first attempt: %v, want ErrOutcomeUnknown", err)
	}
	s.mu.Lock()
	s.failReads = false
	s.mu.Unlock()

	rs, err = w.Append(context.Background(), entries(t, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if !rs[0].AlreadyPresent {
		t.Errorf("retry of x: %+v, want AlreadyPresent (the first attempt landed)", rs[0])
	}
	l.add(t, rs)
	l.verify(t, s, "s")
}
