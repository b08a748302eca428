package client

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// A call whose context carries a span sends it as W3C traceparent, beside
// the metadata already there; one without a span is left as it was, at no
// cost.
func TestTraceContextPropagated(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := metadata.AppendToOutgoingContext(context.Background(), ShardHeader, "a")
	md, _ := metadata.FromOutgoingContext(withTraceContext(trace.ContextWithSpanContext(ctx, sc)))
	if got := md.Get("traceparent"); len(got) != 1 || got[0] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("traceparent %q", got)
	}
	if got := md.Get(ShardHeader); len(got) != 1 || got[0] != "a" {
		t.Fatalf("%s %q: the metadata already there was lost", ShardHeader, got)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if withTraceContext(ctx) != ctx {
			t.Fatal("context changed with no span")
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations for a call with no span", allocs)
	}
}
