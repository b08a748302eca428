package traced

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func recorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// The decorator keeps the store's contract: the conformance suite, run
// inside a sampled span so that every call is traced.
func TestConformance(t *testing.T) {
	_, tp := recorder(t)
	blobtest.Run(t, func(t *testing.T) blob.Store { return &sampledCtx{New(memstore.New(), tp).(*Store), tp} })
}

// Each call under a sampled span gets a child span named by its kind with
// its outcome; a call under no span gets none.
func TestSpansUnderParent(t *testing.T) {
	rec, tp := recorder(t)
	s := New(memstore.New(), tp)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	if _, err := s.Put(ctx, "x", []byte("1"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "x", []byte("1"), blob.PutOptions{IfNoneMatch: true}); !errors.Is(err, blob.ErrConditionFailed) {
		t.Fatalf("second create: %v", err)
	}
	parent.End()
	if _, _, err := s.Get(context.Background(), "x", blob.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want the two puts' and the parent", len(spans))
	}
	for i, want := range []string{"ok", "condition_failed"} {
		sp := spans[i]
		if sp.Name() != "blob.put_create" || sp.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %d: %q under %s", i, sp.Name(), sp.Parent().SpanID())
		}
		var outcome string
		for _, a := range sp.Attributes() {
			if a.Key == "rolloutd.blob.outcome" {
				outcome = a.Value.AsString()
			}
		}
		if outcome != want {
			t.Errorf("span %d outcome %q, want %q", i, outcome, want)
		}
	}
}

// sampledCtx runs every call of a Store inside a sampled span.
// It stays a hand-written wrapper: it must change the context the traced
// Store is called with, and a faultstore only sees calls on their way to
// its inner store, with the caller's context.
type sampledCtx struct {
	*Store
	tp *sdktrace.TracerProvider
}

func (s *sampledCtx) ctx(ctx context.Context) context.Context {
	ctx, span := s.tp.Tracer("test").Start(ctx, "call")
	span.End() // ended spans still parent; the recorder does not care
	return ctx
}

func (s *sampledCtx) Get(ctx context.Context, name string, o blob.GetOptions) ([]byte, blob.Attrs, error) {
	return s.Store.Get(s.ctx(ctx), name, o)
}
func (s *sampledCtx) Head(ctx context.Context, name string) (blob.Attrs, error) {
	return s.Store.Head(s.ctx(ctx), name)
}
func (s *sampledCtx) Put(ctx context.Context, name string, d []byte, o blob.PutOptions) (blob.Attrs, error) {
	return s.Store.Put(s.ctx(ctx), name, d, o)
}
func (s *sampledCtx) Delete(ctx context.Context, name string, o blob.DeleteOptions) error {
	return s.Store.Delete(s.ctx(ctx), name, o)
}
func (s *sampledCtx) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	return s.Store.List(s.ctx(ctx), opts)
}
