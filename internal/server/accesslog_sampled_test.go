package server

import (
	"context"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// Under load nearly every call's access-log line is sampled out, and such
// a call must cost next to nothing: its fields (caller, peer address,
// request) are built only for a line that is written. It is still timed
// and counted like every other call, and the sampler keeps its semantics:
// per second, the first 10 lines, then one in 100.
func TestSampledOutAccessLogBuildsNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, ctx, logs := interceptorServer(t, reg)
	req := &rolloutv1.AppendRequest{Shard: "team-a/run1", RequestId: "req-1", Records: []*rolloutv1.Record{record("a")}}
	resp := &rolloutv1.AppendResponse{}
	info := &grpc.UnaryServerInfo{FullMethod: rolloutPrefix + "Append"}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	call := func() {
		if _, err := s.accessLog(ctx, req, info, handler); err != nil {
			t.Fatal(err)
		}
	}

	for range 10 { // the second's first 10 lines are written
		call()
	}
	const runs = 50
	// Before the fix: 7 allocations per call, all of them fields of a line the
	// sampler then dropped.
	if allocs := testing.AllocsPerRun(runs, call); allocs > 1 {
		t.Errorf("a sampled-out access-log line costs %v allocations per call, want at most 1", allocs)
	}
	calls := 10 + runs + 1 // AllocsPerRun warms up with one call
	lines := logs.FilterMessage("rpc").Len()
	// The sampler's second may have turned over during the calls: then
	// its count restarted, and it wrote up to 10 more.
	if lines < 10 || lines > 21 {
		t.Errorf("%d calls wrote %d access-log lines, want the sampler's first 10 (and at most 10 more if its second turned over)", calls, lines)
	}
	for _, e := range logs.FilterMessage("rpc").All() {
		m := e.ContextMap()
		if m["method"] != "Append" || m["shard"] != "team-a/run1" || m["peer"] != "127.0.0.1:40000" || m["records"] != int64(1) || m["code"] != "OK" {
			t.Fatalf("a written line lost its fields: %v", m)
		}
	}
	if n := histogramCount(t, reg, "rolloutd_rpc_duration_seconds", map[string]string{"method": "Append", "code": "OK"}); n != uint64(calls) {
		t.Errorf("rolloutd_rpc_duration_seconds counted %d calls, want every one of %d", n, calls)
	}
}

// interceptorServer is a Server, not serving, whose interceptors a test
// calls directly, logging at Info to logs, and the context of a call
// tagged as the stats handler and the transport tag a served one.
func interceptorServer(t *testing.T, reg prometheus.Registerer) (*Server, context.Context, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	s, err := New(Config{Store: memstore.New(), Logger: zap.New(core), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	stopUnserved(t, s)
	ctx := context.WithValue(context.Background(), callKey{}, newCall())
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	return s, ctx, logs
}
