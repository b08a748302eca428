// Package instrumented is a blob.Store decorator that counts every storage
// operation by kind and outcome and times it, for Prometheus.
//
// It wraps any backend, so the metrics read the same whether rolloutd runs on
// Azure, Azurite or the local disk.
package instrumented

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Store counts and times the operations of the store it wraps.
type Store struct {
	next     blob.Store
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var _ blob.Store = (*Store)(nil)

// Metrics holds the collectors of a Store. One Metrics serves any number of
// Stores; register it once.
type Metrics struct {
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates the blob operation metrics and registers them with reg
// (nil: not registered).
//
//	rolloutd_blob_operations_total{op, outcome}
//	rolloutd_blob_operation_duration_seconds{op}
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rolloutd_blob_operations_total",
			Help: "Blob store operations by kind (get, head, put, put_create, put_cas, delete, list) and outcome (ok or the error class).",
		}, []string{"op", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rolloutd_blob_operation_duration_seconds",
			Help:    "Latency of blob store operations by kind, whatever their outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
		}, []string{"op"}),
	}
	if reg != nil {
		reg.MustRegister(m.ops, m.duration)
	}
	return m
}

// New wraps next so that its operations are recorded in m. The result is
// a blob.ManyDeleter exactly when next is one.
func New(next blob.Store, m *Metrics) blob.Store {
	s := &Store{next: next, ops: m.ops, duration: m.duration}
	if many, ok := next.(blob.ManyDeleter); ok {
		return &manyStore{s, many}
	}
	return s
}

// manyStore is a Store over a blob.ManyDeleter.
type manyStore struct {
	*Store
	many blob.ManyDeleter
}

// DeleteMany implements blob.ManyDeleter. Each name counts as one delete,
// and each is recorded with the duration of the whole call, which is how
// long its caller waited for it.
func (s *manyStore) DeleteMany(ctx context.Context, names []string) []error {
	start := time.Now()
	errs := s.many.DeleteMany(ctx, names)
	for _, err := range errs {
		s.observe("delete", start, err)
	}
	return errs
}

// Outcome classifies err for the outcome label: "ok", the blob error class
// ("not_found", "condition_failed", "not_modified", "unavailable",
// "store_failed", "outcome_unknown", "invalid_name", "closed", "no_space"), "canceled",
// "deadline" or "error". The write that made a store fail matches both
// ErrStoreFailed and ErrOutcomeUnknown; it counts as "store_failed".
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, blob.ErrNotFound):
		return "not_found"
	case errors.Is(err, blob.ErrConditionFailed):
		return "condition_failed"
	case errors.Is(err, blob.ErrNotModified):
		return "not_modified"
	case errors.Is(err, blob.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, blob.ErrStoreFailed):
		return "store_failed"
	case errors.Is(err, blob.ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.Is(err, blob.ErrInvalidName):
		return "invalid_name"
	case errors.Is(err, blob.ErrClosed):
		return "closed"
	case errors.Is(err, blob.ErrNoSpace):
		return "no_space"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	default:
		return "error"
	}
}

func (s *Store) observe(op string, start time.Time, err error) {
	s.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	s.ops.WithLabelValues(op, Outcome(err)).Inc()
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	start := time.Now()
	data, attrs, err := s.next.Get(ctx, name, opts)
	s.observe("get", start, err)
	return data, attrs, err
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	start := time.Now()
	attrs, err := s.next.Head(ctx, name)
	s.observe("head", start, err)
	return attrs, err
}

// Put implements blob.Store. Create-only puts are "put_create", ETag
// compare-and-swaps "put_cas", unconditional ones "put".
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	start := time.Now()
	attrs, err := s.next.Put(ctx, name, data, opts)
	s.observe(opts.OpName(), start, err)
	return attrs, err
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	start := time.Now()
	err := s.next.Delete(ctx, name, opts)
	s.observe("delete", start, err)
	return err
}

// List implements blob.Store; a listing with a delimiter counts as a list.
func (s *Store) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	start := time.Now()
	page, err := s.next.List(ctx, opts)
	s.observe("list", start, err)
	return page, err
}
