package shard

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolloutd/rolloutd/internal/tracing/spans"
)

// Tracing, when Options.Tracer is set. An append's trace gets two spans
// of the writer's: shard.queue_wait, from its queueing until the committer
// takes it, and shard.commit, the group commit that carried it, whose
// storage calls are its children. A group commit carries several appends
// but has one parent: the oldest append's span; the others are its links.
// A checkpoint is off every ack path and starts a trace of its own.
//
// With no Tracer every helper returns at its first test: no span, no
// allocation.

// maxCommitLinks bounds the links of one commit span.
const maxCommitLinks = 32

// startQueueWait starts p's queue-wait span, if ctx's span is sampled.
func (w *writer) startQueueWait(ctx context.Context, p *pending) {
	if w.opts.Tracer == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return
	}
	_, p.wait = w.opts.Tracer.Start(ctx, "shard.queue_wait",
		trace.WithAttributes(attribute.String("rolloutd.shard", w.shard), attribute.Int64("rolloutd.bytes", p.bytes)))
}

// endQueueWaits ends the queue-wait spans of the appends the committer
// took.
func endQueueWaits(batch []*pending) {
	for _, p := range batch {
		if p.wait != nil {
			p.wait.End()
		}
	}
}

// startCommit starts the span of the commit of live under ctx, the
// committer's own context, as a child of the oldest sampled append's span.
func (w *writer) startCommit(ctx context.Context, live []*pending) (context.Context, trace.Span) {
	if w.opts.Tracer == nil {
		return ctx, nil
	}
	var parent trace.Span
	var links []trace.Link
	for _, p := range live {
		span := trace.SpanFromContext(p.ctx)
		switch {
		case !span.SpanContext().IsSampled():
		case parent == nil:
			parent = span
		case len(links) < maxCommitLinks:
			links = append(links, trace.Link{SpanContext: span.SpanContext()})
		}
	}
	if parent == nil {
		return ctx, nil
	}
	return w.opts.Tracer.Start(trace.ContextWithSpan(ctx, parent), "shard.commit", trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("rolloutd.shard", w.shard), attribute.Int64("rolloutd.epoch", int64(w.epoch)), attribute.Int("rolloutd.appends", len(live))))
}

// startCheckpoint starts a checkpoint's span, the root of its own trace,
// which the tracer's sampler decides.
func (w *writer) startCheckpoint(ctx context.Context) (context.Context, trace.Span) {
	if w.opts.Tracer == nil {
		return ctx, nil
	}
	return w.opts.Tracer.Start(ctx, "shard.checkpoint", trace.WithNewRoot(),
		trace.WithAttributes(attribute.String("rolloutd.shard", w.shard), attribute.Int64("rolloutd.epoch", int64(w.epoch))))
}

// endSpan ends span, marking it failed with err.
func endSpan(span trace.Span, err error) { spans.End(span, err) }
