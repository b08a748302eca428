package shard

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// With no Tracer, the writer's tracing adds nothing to an append: no span
// and no allocation, even for a call whose context carries a sampled span.
func TestTracingOffAllocatesNothing(t *testing.T) {
	w := &writer{shard: "s"}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	for _, ctx := range []context.Context{context.Background(), trace.ContextWithSpanContext(context.Background(), sc)} {
		p := &pending{ctx: ctx}
		batch := []*pending{p}
		allocs := testing.AllocsPerRun(100, func() {
			w.startQueueWait(ctx, p)
			endQueueWaits(batch)
			cctx, span := w.startCommit(ctx, batch)
			endSpan(span, nil)
			kctx, kspan := w.startCheckpoint(ctx)
			endSpan(kspan, nil)
			if p.wait != nil || span != nil || kspan != nil || cctx != ctx || kctx != ctx {
				t.Fatal("a span with no Tracer")
			}
		})
		if allocs != 0 {
			t.Fatalf("%v allocations per append with tracing off", allocs)
		}
	}
}
