package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		enabled bool
		ratio   float64
		err     bool
	}{
		{name: "unset is off", env: nil, ratio: 1},
		{name: "endpoint turns it on", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, enabled: true, ratio: 1},
		{name: "traces endpoint turns it on", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, enabled: true, ratio: 1},
		{name: "otlp turns it on", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, enabled: true, ratio: 1},
		{name: "none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, ratio: 1},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, ratio: 1},
		{name: "zipkin is refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
		{name: "http protocol is refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, err: true},
		{name: "traces protocol grpc wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, enabled: true, ratio: 1},
		{name: "ratio", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}, enabled: true, ratio: 0.25},
		{name: "parentbased ratio", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.5"}, enabled: true, ratio: 0.5},
		{name: "always off", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "always_off"}, enabled: true, ratio: 0},
		{name: "ratio out of range", env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, err: true},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromEnv(env(tt.env))
			if tt.err {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err %v, want ErrConfig", err)
				}
				return
			}
			if err != nil || s.Enabled != tt.enabled || s.Ratio != tt.ratio {
				t.Fatalf("got %+v, %v; want enabled %v ratio %v", s, err, tt.enabled, tt.ratio)
			}
		})
	}
}

// Off means nothing is set up: no provider, so the server gets none.
func TestNewOffIsNil(t *testing.T) {
	p, err := New(context.Background(), Settings{}, nil, "v")
	if err != nil || p != nil || p.TracerProvider() != nil || p.Shutdown(context.Background()) != nil {
		t.Fatalf("New(off) = %v, %v", p, err)
	}
}

// The sampler ignores what the caller can choose: a remote parent's
// sampled flag, and a trace id that a ratio sampler reading trace ids
// would always sample.
func TestSamplerIgnoresCallerChoices(t *testing.T) {
	remote := func(id trace.TraceID, sampled bool) context.Context {
		cfg := trace.SpanContextConfig{TraceID: id, SpanID: trace.SpanID{1}, Remote: true}
		if sampled {
			cfg.TraceFlags = trace.FlagsSampled
		}
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
	}
	local := func(sampled bool) context.Context {
		cfg := trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{1}}
		if sampled {
			cfg.TraceFlags = trace.FlagsSampled
		}
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
	}
	decide := func(s sampler, ctx context.Context) bool {
		r := s.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: trace.SpanContextFromContext(ctx).TraceID(), Name: "x"})
		return r.Decision == sdktrace.RecordAndSample
	}
	small := trace.TraceID{15: 1}
	if r := sdktrace.TraceIDRatioBased(1e-9).ShouldSample(sdktrace.SamplingParameters{ParentContext: remote(small, true), TraceID: small}); r.Decision != sdktrace.RecordAndSample {
		t.Fatal("test premise: TraceIDRatioBased(1e-9) samples a trace id chosen small")
	}
	for range 1000 {
		if decide(sampler{ratio: 1e-9}, remote(small, true)) {
			t.Fatal("a trace id chosen small was sampled at ratio 1e-9")
		}
	}
	cases := []struct {
		name string
		s    sampler
		ctx  context.Context
		want bool
	}{
		{"remote sampled, ratio 0", sampler{0}, remote(trace.TraceID{1}, true), false},
		{"remote unsampled, ratio 1", sampler{1}, remote(trace.TraceID{1}, false), true},
		{"root, ratio 1", sampler{1}, context.Background(), true},
		{"root, ratio 0", sampler{0}, context.Background(), false},
		{"local sampled, ratio 0", sampler{0}, local(true), true},
		{"local unsampled, ratio 1", sampler{1}, local(false), false},
	}
	for _, c := range cases {
		if got := decide(c.s, c.ctx); got != c.want {
			t.Errorf("%s: sampled %v, want %v", c.name, got, c.want)
		}
	}
}

type failingExporter struct{ calls int }

func (f *failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	f.calls++
	return errors.New("collector down")
}
func (*failingExporter) Shutdown(context.Context) error { return nil }

// A collector that is down fails every export: the batch processor hears
// no error, and the log gets one line a minute with what was dropped.
func TestExportFailuresLogOnceAMinute(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	now := time.Unix(1000, 0)
	q := newQuietExporter(&failingExporter{}, zap.New(core))
	q.now = func() time.Time { return now }
	spans := tracetest.SpanStubs{{Name: "a"}, {Name: "b"}}.Snapshots()
	for i := range 5 {
		if err := q.ExportSpans(context.Background(), spans); err != nil {
			t.Fatalf("export %d returned %v; want nil", i, err)
		}
		now = now.Add(10 * time.Second)
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d log lines in 50 s, want 1", n)
	}
	now = now.Add(time.Minute)
	_ = q.ExportSpans(context.Background(), spans)
	all := logs.All()
	if len(all) != 2 {
		t.Fatalf("%d log lines after a minute, want 2", len(all))
	}
	f := all[1].ContextMap()
	if f["failures"] != int64(5) || f["dropped_spans"] != int64(10) {
		t.Fatalf("second line %v: want the 5 failures and 10 spans since the first", f)
	}
}
