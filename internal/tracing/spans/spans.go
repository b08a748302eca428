// Package spans holds the span helpers that the server and the shard
// writers share. It depends on the OpenTelemetry API alone, not on the SDK
// and exporter that package tracing sets up, so the storage engine can use
// it without them.
package spans

import (
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// End ends span, marking it failed with err. A nil span (tracing off) is
// a no-op.
func End(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
