package server

import (
	"context"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/rolloutd/rolloutd/internal/blob/traced"
)

// tracingHandler is the stats handler that gives each RPC its server span,
// continuing the trace of the caller's W3C traceparent; nil when tp is nil,
// and then the server installs nothing. Health checks, which kubelet and
// load balancers send every few seconds, get no span. Its metrics are off:
// Prometheus has the server's.
func tracingHandler(tp trace.TracerProvider) stats.Handler {
	if tp == nil {
		return nil
	}
	return otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(func(info *stats.RPCTagInfo) bool {
			return !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/")
		}),
	)
}

// withTracing installs tracing on c when c.TracerProvider is set: the
// stats handler, the shard writers' tracer and the store's spans.
func (c Config) withTracing() Config {
	h := tracingHandler(c.TracerProvider)
	if h == nil {
		return c
	}
	c.ServerOptions = append(append([]grpc.ServerOption(nil), c.ServerOptions...), grpc.StatsHandler(h))
	if c.Writer.Tracer == nil {
		c.Writer.Tracer = c.TracerProvider.Tracer("github.com/rolloutd/rolloutd/internal/shard")
	}
	c.Store = traced.New(c.Store, c.TracerProvider)
	return c
}

// openParent is the span an open started by ctx's request goes under: the
// request's, when traced and sampled; nil otherwise.
func (s *writerSet) openParent(ctx context.Context) trace.Span {
	if s.tracer == nil {
		return nil
	}
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsSampled() {
		return span
	}
	return nil
}

// startOpen starts the span of a writer's open (its claim, and under
// protocol v2 its probe of the log and fence) under parent. The open is
// detached from the request, so the span may outlive it.
func (s *writerSet) startOpen(ctx context.Context, parent trace.Span, shardName string) (context.Context, trace.Span) {
	if parent == nil {
		return ctx, nil
	}
	return s.tracer.Start(trace.ContextWithSpan(ctx, parent), "shard.open", trace.WithAttributes(attribute.String("rolloutd.shard", shardName)))
}
