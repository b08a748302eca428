// Package traced is a blob.Store decorator that gives each storage
// operation an OpenTelemetry span, the child of the span its context
// carries. An operation whose context carries no span (a merge, GC) gets
// none, so background work does not start traces of its own.
//
// It wraps any backend, Azure and the embedded local store alike. rolloutd
// wraps its store in it only when tracing is on: when it is off there is
// no decorator and no work.
package traced

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/instrumented"
)

// Store traces the operations of the store it wraps.
type Store struct {
	next   blob.Store
	tracer trace.Tracer
}

var _ blob.Store = (*Store)(nil)

// New wraps next; its spans come from tp. The result is a
// blob.ManyDeleter exactly when next is one.
func New(next blob.Store, tp trace.TracerProvider) blob.Store {
	s := &Store{next: next, tracer: tp.Tracer("github.com/rolloutd/rolloutd/internal/blob")}
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

// DeleteMany implements blob.ManyDeleter, as one span named by the first
// name; it ends with the first error, if any.
func (s *manyStore) DeleteMany(ctx context.Context, names []string) []error {
	if len(names) == 0 {
		return nil
	}
	ctx, span := s.start(ctx, "delete_many", names[0])
	errs := s.many.DeleteMany(ctx, names)
	end(span, errors.Join(errs...))
	return errs
}

// start begins the span of op on name, if ctx carries a sampled span to
// hang it under.
func (s *Store) start(ctx context.Context, op, name string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, nil
	}
	return s.tracer.Start(ctx, "blob."+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("rolloutd.blob.op", op), attribute.String("rolloutd.blob.name", name)))
}

// end records err's class as the span's outcome.
func end(span trace.Span, err error) {
	if span == nil {
		return
	}
	outcome := instrumented.Outcome(err)
	span.SetAttributes(attribute.String("rolloutd.blob.outcome", outcome))
	if err != nil {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	ctx, span := s.start(ctx, "get", name)
	data, attrs, err := s.next.Get(ctx, name, opts)
	end(span, err)
	return data, attrs, err
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	ctx, span := s.start(ctx, "head", name)
	attrs, err := s.next.Head(ctx, name)
	end(span, err)
	return attrs, err
}

// Put implements blob.Store; the span is named as the metrics name the
// put: put_create, put_cas or put.
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	ctx, span := s.start(ctx, opts.OpName(), name)
	if span != nil {
		span.SetAttributes(attribute.Int("rolloutd.blob.bytes", len(data)))
	}
	attrs, err := s.next.Put(ctx, name, data, opts)
	end(span, err)
	return attrs, err
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	ctx, span := s.start(ctx, "delete", name)
	err := s.next.Delete(ctx, name, opts)
	end(span, err)
	return err
}

// List implements blob.Store; a listing with a delimiter is a list.
func (s *Store) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	ctx, span := s.start(ctx, "list", opts.Prefix)
	page, err := s.next.List(ctx, opts)
	end(span, err)
	return page, err
}
