package consumer

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/clock"
)

// backend is a store the tests run on: no mocks, the real in-memory and
// embedded local stores (and Azurite in azurite_test.go).
type backend struct {
	name string
	open func(t *testing.T) blob.Store
}

var backends = []backend{
	{"memstore", func(*testing.T) blob.Store { return memstore.New() }},
	{"localstore", func(t *testing.T) blob.Store {
		s, err := localstore.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}},
}

// eachBackend runs f on every backend.
func eachBackend(t *testing.T, f func(t *testing.T, bs blob.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.open(t)) })
	}
}

var epoch = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// newStore is a Store on bs with a fake clock.
func newStore(t *testing.T, bs blob.Store) (*Store, *clock.Fake) {
	clk := clock.NewFake(epoch)
	return New(bs, Options{Clock: clk, Logger: zaptest.NewLogger(t)}), clk
}

// counted wraps bs so that a test can count the calls that reach it.
func counted(bs blob.Store) *faultstore.Store { return faultstore.New(bs, 1) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCommit(t *testing.T, s *Store, k Key, pos map[string]uint64, gen uint64) *Consumer {
	t.Helper()
	c, err := s.Commit(ctxT(t), k, pos, gen)
	if err != nil {
		t.Fatalf("Commit(%v, %v, %d): %v", k, pos, gen, err)
	}
	return c
}

func mustLoad(t *testing.T, s *Store, k Key) *Consumer {
	t.Helper()
	c, err := s.Load(ctxT(t), k)
	if err != nil {
		t.Fatalf("Load(%v): %v", k, err)
	}
	return c
}
