package tracing_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/testutil/otlpreceiver"
	"github.com/rolloutd/rolloutd/internal/tracing"
)

// startRolloutd serves rolloutd in process over the embedded local store,
// with tracing set up from env exactly as rolloutd serve does. stop shuts
// it down and then flushes the exporter, as serve does.
func startRolloutd(t *testing.T, env map[string]string) (addr string, stop func()) {
	for k, v := range env {
		t.Setenv(k, v)
	}
	settings, err := tracing.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	tp, err := tracing.New(context.Background(), settings, log, "test")
	if err != nil {
		t.Fatal(err)
	}
	store, err := localstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Store: store, Logger: log, TracerProvider: tp.TracerProvider()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			if err := tp.Shutdown(ctx); err != nil {
				t.Errorf("tracing shutdown: %v", err)
			}
			if err := store.Close(); err != nil {
				t.Errorf("store close: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return lis.Addr().String(), stop
}

// callerContext is a context carrying the span of a caller in another
// process, sampled, as an application's tracing would hand it to the
// client.
func callerContext(t *testing.T) (context.Context, trace.SpanContext) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return trace.ContextWithSpanContext(ctx, sc), sc
}

func appendOne(t *testing.T, ctx context.Context, addr string) {
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Append(ctx, "trace/demo", []*rolloutv1.Record{{Id: "r-1", RolloutId: "ro-1", Content: "hello"}}); err != nil {
		t.Fatal(err)
	}
}

func otlpEnv(r *otlpreceiver.Receiver, sampler string) map[string]string {
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + r.Addr,
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_TRACES_SAMPLER":         sampler,
		"OTEL_SERVICE_NAME":           "rolloutd-test",
	}
}

// One Append with the caller's traceparent, exported to a real OTLP
// receiver, shows where its time went: the server span continues the
// caller's trace, and under it are the wait in the shard's queue and the
// group commit, whose storage calls are its children.
func TestAppendTraceReachesOTLPReceiver(t *testing.T) {
	r := otlpreceiver.Start(t)
	addr, stop := startRolloutd(t, otlpEnv(r, "parentbased_always_on"))
	ctx, caller := callerContext(t)
	appendOne(t, ctx, addr)
	stop() // flushes the exporter

	var spans []*tracepb.Span
	for _, s := range r.Spans() {
		if trace.TraceID(s.GetTraceId()) == caller.TraceID() {
			spans = append(spans, s)
		}
	}
	t.Logf("one Append's trace, as the OTLP receiver got it:\n%s", tree(spans, caller.SpanID()))
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.GetName()] = append(byName[s.GetName()], s)
	}
	rpc := only(t, byName, "rollout.v1.RolloutService/Append")
	if got := trace.SpanID(rpc.GetParentSpanId()); got != caller.SpanID() {
		t.Errorf("server span's parent %s, want the caller's span %s", got, caller.SpanID())
	}
	if rpc.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("server span kind %v", rpc.GetKind())
	}
	wait := only(t, byName, "shard.queue_wait")
	commit := only(t, byName, "shard.commit")
	open := only(t, byName, "shard.open") // the shard's first append opens its writer
	for _, s := range []*tracepb.Span{open, wait, commit} {
		if !bytesEq(s.GetParentSpanId(), rpc.GetSpanId()) {
			t.Errorf("%s: parent %x, want the server span %x", s.GetName(), s.GetParentSpanId(), rpc.GetSpanId())
		}
	}
	creates := byName["blob.put_create"]
	var underCommit int
	for _, s := range creates {
		if bytesEq(s.GetParentSpanId(), commit.GetSpanId()) {
			underCommit++
		}
	}
	if underCommit != 1 {
		t.Errorf("%d blob.put_create spans under shard.commit, want 1 (the log position's create)", underCommit)
	}
	checkpointed(t, r.Spans())
	if commit.GetEndTimeUnixNano() > rpc.GetEndTimeUnixNano() || wait.GetEndTimeUnixNano() > commit.GetStartTimeUnixNano()+uint64(time.Millisecond) {
		t.Errorf("timing: queue wait ends %d, commit %d..%d, rpc ends %d", wait.GetEndTimeUnixNano(), commit.GetStartTimeUnixNano(), commit.GetEndTimeUnixNano(), rpc.GetEndTimeUnixNano())
	}
}

// The server's sampler decides, not the caller: a traceparent with the
// sampled flag set, sent to a server whose sampler samples nothing, gets
// no span exported.
func TestCallerCannotForceSampling(t *testing.T) {
	r := otlpreceiver.Start(t)
	addr, stop := startRolloutd(t, otlpEnv(r, "parentbased_always_off"))
	ctx, _ := callerContext(t)
	appendOne(t, ctx, addr)
	stop()
	if got := r.Spans(); len(got) != 0 {
		t.Fatalf("%d spans exported with the sampler off, first %q", len(got), got[0].GetName())
	}
}

// checkpointed checks that the writer's checkpoint, off the append's ack
// path, was traced as a trace of its own with its manifest write under it.
func checkpointed(t *testing.T, all []*tracepb.Span) {
	t.Helper()
	for _, ck := range all {
		if ck.GetName() != "shard.checkpoint" {
			continue
		}
		if len(ck.GetParentSpanId()) != 0 {
			t.Errorf("shard.checkpoint has parent %x, want a root span", ck.GetParentSpanId())
		}
		for _, s := range all {
			if s.GetName() == "blob.put_cas" && bytesEq(s.GetParentSpanId(), ck.GetSpanId()) {
				return
			}
		}
	}
	t.Errorf("no shard.checkpoint span with a blob.put_cas child among %d spans", len(all))
}

func only(t *testing.T, byName map[string][]*tracepb.Span, name string) *tracepb.Span {
	t.Helper()
	if n := len(byName[name]); n != 1 {
		t.Fatalf("%d spans named %q, want 1", n, name)
	}
	return byName[name][0]
}

func bytesEq(a, b []byte) bool { return hex.EncodeToString(a) == hex.EncodeToString(b) }

// tree renders spans as an indented tree under root: name, duration, and
// offset from the trace's first span.
func tree(spans []*tracepb.Span, root trace.SpanID) string {
	if len(spans) == 0 {
		return "(no spans)"
	}
	children := map[string][]*tracepb.Span{}
	var t0 uint64
	for _, s := range spans {
		p := hex.EncodeToString(s.GetParentSpanId())
		children[p] = append(children[p], s)
		if t0 == 0 || s.GetStartTimeUnixNano() < t0 {
			t0 = s.GetStartTimeUnixNano()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "trace %x, caller span %s\n", spans[0].GetTraceId(), root)
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		sort.Slice(kids, func(i, j int) bool { return kids[i].GetStartTimeUnixNano() < kids[j].GetStartTimeUnixNano() })
		for _, s := range kids {
			d := time.Duration(s.GetEndTimeUnixNano() - s.GetStartTimeUnixNano())
			at := time.Duration(s.GetStartTimeUnixNano() - t0)
			var blobName string
			for _, a := range s.GetAttributes() {
				if a.GetKey() == "rolloutd.blob.name" {
					blobName = a.GetValue().GetStringValue()
				}
			}
			fmt.Fprintf(&b, "%s%-40s +%-10v %-10v %s\n", strings.Repeat("  ", depth), s.GetName(), at.Round(time.Microsecond), d.Round(time.Microsecond), blobName)
			walk(hex.EncodeToString(s.GetSpanId()), depth+1)
		}
	}
	walk(root.String(), 0)
	return b.String()
}
