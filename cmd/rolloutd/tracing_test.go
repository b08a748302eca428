package main

import (
	"context"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/rolloutd/rolloutd/internal/testutil/otlpreceiver"
)

// Tracing is read from the standard OTEL_* variables: off unless asked
// for, a value rolloutd cannot honour fails the start, and none of them is
// an unknown ROLLOUTD_* name.
func TestConfigTracing(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil || c.tracing.Enabled {
		t.Fatalf("default: tracing %+v, %v; want off", c.tracing, err)
	}
	c, err = parseConfig(nil, env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317", "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.1"), io.Discard)
	if err != nil || !c.tracing.Enabled || c.tracing.Ratio != 0.1 {
		t.Fatalf("endpoint set: tracing %+v, %v; want on at 0.1", c.tracing, err)
	}
	if _, err := parseConfig(nil, env("OTEL_TRACES_EXPORTER", "zipkin"), io.Discard); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("zipkin: %v, want an error naming OTEL_TRACES_EXPORTER", err)
	}
	if got := unknownEnvVars([]string{"OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4317"}, c.flagNames); len(got) != 0 {
		t.Fatalf("OTEL_* reported as unknown: %v", got)
	}
}

const callerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// The binary exports over OTLP when an endpoint is set, and flushes at
// shutdown: the span of an append made just before SIGTERM reaches the
// collector, well before the batch processor's 5 s schedule would send it.
func TestTracingFlushedAtShutdown(t *testing.T) {
	r := otlpreceiver.Start(t)
	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + r.Addr, "OTEL_EXPORTER_OTLP_INSECURE=true"}, "--store", t.TempDir())
	p.WaitLog("tracing: exporting spans over OTLP/gRPC")
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "traceparent", callerTraceparent), 10*time.Second)
	defer cancel()
	if _, err := appendOne(ctx, p.Client, "traced", "r1"); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.Signal(syscall.SIGTERM, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	var found bool
	for _, s := range r.Spans() {
		if s.GetName() == "rollout.v1.RolloutService/Append" && trace.TraceID(s.GetTraceId()).String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no Append span of the caller's trace among %d spans received", len(r.Spans()))
	}
}

// A collector that cannot be reached fails no call, holds shutdown no
// longer than its budget, and is logged.
func TestTracingCollectorDownFailsNoCall(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close()
	p := start(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + down, "OTEL_EXPORTER_OTLP_INSECURE=true"}, "--store", t.TempDir(), "--shutdown-timeout", "2s")
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "traceparent", callerTraceparent), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if _, err := appendOne(ctx, p.Client, "traced", "r"+string(rune('a'+i))); err != nil {
			t.Fatalf("append %d with the collector down: %v", i, err)
		}
	}
	code, took := p.Signal(syscall.SIGTERM, 2*time.Second)
	if code != 0 || took > 3*time.Second {
		t.Fatalf("exit code %d after %v; want 0 within the 2 s shutdown budget\n%s", code, took, p.Output())
	}
	if out := p.Output(); !strings.Contains(out, "tracing: exporting spans failed") && !strings.Contains(out, "tracing: flushing spans at shutdown") {
		t.Fatalf("the export failure was not logged:\n%s", out)
	}
}
