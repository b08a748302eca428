package tracing

import (
	"context"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/zap"
)

// failureLogEvery spaces the log lines of failed exports: a collector that
// is down fails every batch, and one line a minute says so.
const failureLogEvery = time.Minute

// quietExporter reports its exporter's failures to the log, rate-limited,
// and never to the batch processor, whose default is to print each one
// through OpenTelemetry's global error handler. Spans it fails to export
// are dropped: tracing never holds up or fails a call.
type quietExporter struct {
	sdktrace.SpanExporter
	log *zap.Logger
	now func() time.Time

	mu       sync.Mutex
	last     time.Time // of the last line logged
	failures int       // since that line
	dropped  int       // spans, since that line
}

func newQuietExporter(e sdktrace.SpanExporter, log *zap.Logger) *quietExporter {
	return &quietExporter{SpanExporter: e, log: log, now: time.Now}
}

func (q *quietExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if err := q.SpanExporter.ExportSpans(ctx, spans); err != nil {
		q.failed(err, len(spans))
	}
	return nil
}

func (q *quietExporter) failed(err error, spans int) {
	q.mu.Lock()
	q.failures++
	q.dropped += spans
	now := q.now()
	if !q.last.IsZero() && now.Sub(q.last) < failureLogEvery {
		q.mu.Unlock()
		return
	}
	failures, dropped := q.failures, q.dropped
	q.last, q.failures, q.dropped = now, 0, 0
	q.mu.Unlock()
	q.log.Warn("tracing: exporting spans failed; they are dropped, calls are unaffected",
		zap.Error(err), zap.Int("failures", failures), zap.Int("dropped_spans", dropped),
		zap.Duration("next_report_after", failureLogEvery))
}
