package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Trace propagation. Every call whose context carries a span sends it as
// W3C traceparent (and tracestate), so that rolloutd's spans join the
// caller's trace: the application needs no option and no OpenTelemetry
// set-up beyond its own spans. A call whose context carries no span does
// nothing more than that one check.
//
// The client makes no spans of its own: an application that wants client
// spans adds otelgrpc's client stats handler with WithDialOptions, and
// that handler's traceparent, its client span's, replaces this one.

// traceCarrier is outgoing metadata as a propagation.TextMapCarrier.
type traceCarrier metadata.MD

func (c traceCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c traceCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c traceCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// withTraceContext adds ctx's span to the call's outgoing metadata, with
// the application's global propagator when it has set one (it may add
// baggage, say), else with W3C trace context alone.
func withTraceContext(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	var p propagation.TextMapPropagator = otel.GetTextMapPropagator()
	if len(p.Fields()) == 0 {
		p = propagation.TraceContext{}
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	p.Inject(ctx, traceCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

func propagateUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(withTraceContext(ctx), method, req, reply, cc, opts...)
}

func propagateStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(withTraceContext(ctx), desc, cc, method, opts...)
}
