package spans

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestEnd(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("test")

	End(nil, errors.New("tracing off")) // must not panic
	_, ok := tr.Start(context.Background(), "ok")
	End(ok, nil)
	_, failed := tr.Start(context.Background(), "failed")
	End(failed, errors.New("boom"))

	got := rec.Ended()
	if len(got) != 2 {
		t.Fatalf("%d spans ended, want 2", len(got))
	}
	if st := got[0].Status(); st.Code != codes.Unset {
		t.Errorf("span without error: status %v, want Unset", st)
	}
	if st := got[1].Status(); st.Code != codes.Error || st.Description != "boom" {
		t.Errorf("span with error: status %v, want Error \"boom\"", st)
	}
}
