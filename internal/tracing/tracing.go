// Package tracing sets rolloutd's OpenTelemetry tracing up from the
// standard OTEL_* environment: off unless asked for, and then an OTLP/gRPC
// exporter behind a batch processor whose failures never reach a call.
//
// It owns the one decision that matters for safety: whether a span is
// sampled is this process's sampler's choice alone. A caller's trace id is
// always continued, but its sampled flag is not obeyed, so a client cannot
// make the server record and export spans by sending traceparent ...-01.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Settings is what the environment asks of tracing.
type Settings struct {
	// Enabled: spans are exported. When false nothing of tracing is set
	// up, and calls do no tracing work at all.
	Enabled bool
	// Ratio is the share of traces sampled, 0 to 1.
	Ratio float64
	// Sampler is OTEL_TRACES_SAMPLER as given (default always_on), for the
	// start log.
	Sampler string
}

// ErrConfig marks an OTEL_* value rolloutd cannot honour.
var ErrConfig = errors.New("tracing: invalid OTEL_* setting")

// FromEnv reads the settings: exporting is on when OTEL_TRACES_EXPORTER is
// "otlp", or when it is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; "none" and
// OTEL_SDK_DISABLED=true turn it off. The exporter reads the rest of the
// OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers, insecure,
// certificates, timeout, compression).
func FromEnv(getenv func(string) string) (Settings, error) {
	s := Settings{Ratio: 1, Sampler: "always_on"}
	exp := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_EXPORTER")))
	switch exp {
	case "":
		s.Enabled = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "otlp":
		s.Enabled = true
	case "none":
	default:
		return s, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: rolloutd exports traces with \"otlp\" only (or \"none\")", ErrConfig, exp)
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		s.Enabled = false
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(name); p != "" {
			if p != "grpc" {
				return s, fmt.Errorf("%w: %s=%q: rolloutd exports OTLP over gRPC only (\"grpc\")", ErrConfig, name, p)
			}
			break
		}
	}
	return s, parseSampler(getenv, &s)
}

// parseSampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG. The
// parentbased_ variants are accepted, but a remote parent gets the root
// sampler's decision all the same (see sampler).
func parseSampler(getenv func(string) string, s *Settings) error {
	name := strings.TrimSpace(strings.ToLower(getenv("OTEL_TRACES_SAMPLER")))
	if name == "" {
		return nil
	}
	s.Sampler = name
	switch strings.TrimPrefix(name, "parentbased_") {
	case "always_on":
		s.Ratio = 1
	case "always_off":
		s.Ratio = 0
	case "traceidratio":
		arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
		if arg == "" {
			s.Ratio = 1
			return nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return fmt.Errorf("%w: OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", ErrConfig, arg)
		}
		s.Ratio = r
	default:
		return fmt.Errorf("%w: OTEL_TRACES_SAMPLER=%q: want always_on, always_off or traceidratio (parentbased_ variants are read as these: the caller's sampled flag is not obeyed)", ErrConfig, name)
	}
	return nil
}

// sampler samples a span whose parent is local as its parent was, and
// every other span (a root, or the server span of a call that carried a
// traceparent) by ratio, drawn at random rather than from the trace id:
// a trace id is the caller's choice, and one chosen small would otherwise
// be sampled every time.
type sampler struct{ ratio float64 }

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	var sample bool
	switch {
	case psc.IsValid() && !psc.IsRemote():
		sample = psc.IsSampled()
	case s.ratio >= 1:
		sample = true
	case s.ratio > 0:
		sample = rand.Float64() < s.ratio
	}
	d := sdktrace.Drop
	if sample {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: psc.TraceState()}
}

func (s sampler) Description() string {
	return fmt.Sprintf("rolloutd{ratio=%g, remote parent's flag ignored}", s.ratio)
}

// Provider is the process's tracer provider and what it owns: the batch
// processor's goroutine and the exporter's connection.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// New sets tracing up as s says; nil (and no error) when s is not
// Enabled. It starts no connection: the exporter dials on its first
// export. version is the service.version; OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override the resource as usual.
func New(ctx context.Context, s Settings, log *zap.Logger, version string) (*Provider, error) {
	if !s.Enabled {
		return nil, nil
	}
	if log == nil {
		log = zap.NewNop()
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "rolloutd"), attribute.String("service.version", version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler{ratio: s.Ratio}),
		sdktrace.WithBatcher(newQuietExporter(exp, log)),
	)
	return &Provider{tp: tp}, nil
}

// TracerProvider is the provider to hand to the server; nil for a nil
// Provider, which is how "off" travels.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.tp
}

// Shutdown exports what is buffered and stops the exporter, within ctx.
// Call it after the server has stopped, so that the last calls' spans go
// out too.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}
