package server

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

const sampledTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// recordGlobally makes the process's global tracer provider record every
// span, for the test's length.
func recordGlobally(t *testing.T) *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	return rec
}

// With no TracerProvider the server installs no tracing at all: not even
// a tracer provider that records everything, set globally as an
// application might, sees a span of a traced call.
func TestNoTracingWithoutProvider(t *testing.T) {
	c := Config{Store: memstore.New()}.withTracing()
	if len(c.ServerOptions) != 0 || c.Writer.Tracer != nil {
		t.Fatalf("tracing off, yet %d server options and writer tracer %v", len(c.ServerOptions), c.Writer.Tracer)
	}
	if _, ok := c.Store.(*memstore.Store); !ok {
		t.Fatalf("tracing off, yet the store is wrapped: %T", c.Store)
	}
	rec := recordGlobally(t)
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", sampledTraceparent)
	if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "a", Records: []*rolloutv1.Record{record("r1")}}); err != nil {
		t.Fatal(err)
	}
	ts.stop(t)
	if spans := rec.Ended(); len(spans) != 0 {
		t.Fatalf("%d spans recorded with tracing off, first %q", len(spans), spans[0].Name())
	}
}

// With a TracerProvider, the server uses it and not the global one.
func TestTracingUsesItsProvider(t *testing.T) {
	global := recordGlobally(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ts := startServer(t, Config{Store: memstore.New(), TracerProvider: tp})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", sampledTraceparent)
	if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "a", Records: []*rolloutv1.Record{record("r1")}}); err != nil {
		t.Fatal(err)
	}
	ts.stop(t)
	names := map[string]bool{}
	checkpoints := map[string]bool{} // a checkpoint is a trace of its own
	for _, s := range rec.Ended() {
		if s.Name() == "shard.checkpoint" {
			checkpoints[s.SpanContext().TraceID().String()] = true
		}
	}
	for _, s := range rec.Ended() {
		names[s.Name()] = true
		if id := s.SpanContext().TraceID().String(); !checkpoints[id] && id != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %q in trace %s, not the caller's", s.Name(), s.SpanContext().TraceID())
		}
	}
	for _, want := range []string{"rollout.v1.RolloutService/Append", "shard.open", "shard.queue_wait", "shard.commit", "blob.put_create"} {
		if !names[want] {
			t.Errorf("no %q span among %v", want, names)
		}
	}
	if n := len(global.Ended()); n != 0 {
		t.Errorf("%d spans went to the global provider", n)
	}
}
