package server

import (
	"context"
	"sync/atomic"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// opCountKey carries the counter of the store operations one call causes.
type opCountKey struct{}

// countingOps returns ctx with a new counter of the store operations that
// calls under it send through a countedStore.
func countingOps(ctx context.Context) (context.Context, *atomic.Int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, opCountKey{}, n), n
}

// countedStore counts each operation into its context's counter, if it has
// one, so that a call can be charged by the store operations it caused,
// its reader's included (ListShards' summaries).
type countedStore struct{ blob.Store }

var _ blob.Store = countedStore{}

func count(ctx context.Context) {
	if n, ok := ctx.Value(opCountKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

func (s countedStore) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	count(ctx)
	return s.Store.Get(ctx, name, opts)
}

func (s countedStore) Head(ctx context.Context, name string) (blob.Attrs, error) {
	count(ctx)
	return s.Store.Head(ctx, name)
}

func (s countedStore) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	count(ctx)
	return s.Store.Put(ctx, name, data, opts)
}

func (s countedStore) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	count(ctx)
	return s.Store.Delete(ctx, name, opts)
}

func (s countedStore) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	count(ctx)
	return s.Store.List(ctx, opts)
}
