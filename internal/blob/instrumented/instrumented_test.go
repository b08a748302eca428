package instrumented

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func TestCountsByKindAndOutcome(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	s := New(memstore.New(), m)
	ctx := context.Background()

	a, err := s.Put(ctx, "x", []byte("1"), blob.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "x", []byte("2"), blob.PutOptions{IfNoneMatch: true}); !errors.Is(err, blob.ErrConditionFailed) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := s.Put(ctx, "x", []byte("3"), blob.PutOptions{IfMatch: a.ETag}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "y", []byte("4"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "missing", blob.GetOptions{}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := s.Head(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, blob.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "y", blob.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	want := map[[2]string]float64{
		{"put_create", "ok"}:               1,
		{"put_create", "condition_failed"}: 1,
		{"put_cas", "ok"}:                  1,
		{"put", "ok"}:                      1,
		{"get", "not_found"}:               1,
		{"head", "ok"}:                     1,
		{"list", "ok"}:                     1,
		{"delete", "ok"}:                   1,
	}
	for k, v := range want {
		if got := testutil.ToFloat64(m.ops.WithLabelValues(k[0], k[1])); got != v {
			t.Errorf("ops{op=%s,outcome=%s} = %v, want %v", k[0], k[1], got, v)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 7 {
		t.Errorf("duration series: %d, want 7 (one per op kind)", n)
	}
}

func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil:                    "ok",
		blob.ErrNotModified:    "not_modified",
		blob.ErrUnavailable:    "unavailable",
		blob.ErrOutcomeUnknown: "outcome_unknown",
		blob.ErrStoreFailed:    "store_failed",
		fmt.Errorf("%w (%w)", blob.ErrOutcomeUnknown, blob.ErrStoreFailed): "store_failed",
		blob.ErrInvalidName:      "invalid_name",
		blob.ErrClosed:           "closed",
		blob.ErrNoSpace:          "no_space",
		context.Canceled:         "canceled",
		context.DeadlineExceeded: "deadline",
		errors.New("x"):          "error",
	} {
		if got := Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %q, want %q", err, got, want)
		}
	}
}

// manyMem is a memstore with DeleteMany, as the local store has it.
type manyMem struct{ *memstore.Store }

func (m manyMem) DeleteMany(ctx context.Context, names []string) []error {
	errs := make([]error, len(names))
	for i, n := range names {
		errs[i] = m.Delete(ctx, n, blob.DeleteOptions{})
	}
	return errs
}

// The wrapper is a blob.ManyDeleter exactly when its store is, so that the
// collector finds DeleteMany through it; each name counts as one delete.
func TestDeleteManyPassesThrough(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	if _, ok := New(memstore.New(), m).(blob.ManyDeleter); ok {
		t.Fatal("over a store without DeleteMany, the wrapper has it")
	}
	inner := manyMem{memstore.New()}
	ctx := context.Background()
	if _, err := inner.Put(ctx, "x", []byte("1"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	s, ok := New(inner, m).(blob.ManyDeleter)
	if !ok {
		t.Fatal("over a store with DeleteMany, the wrapper lacks it")
	}
	errs := s.DeleteMany(ctx, []string{"x", "missing"})
	if errs[0] != nil || !errors.Is(errs[1], blob.ErrNotFound) {
		t.Fatalf("DeleteMany = %v", errs)
	}
	for outcome, want := range map[string]float64{"ok": 1, "not_found": 1} {
		if got := testutil.ToFloat64(m.ops.WithLabelValues("delete", outcome)); got != want {
			t.Errorf("ops{op=delete,outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
}
