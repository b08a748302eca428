package server

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// goroutineID is the id the runtime prints in the calling goroutine's
// stack header ("goroutine 42 [running]:").
func goroutineID() string {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf[:n], []byte("goroutine ")), []byte(" "))
	return string(id)
}

// RPCs run on goroutines that outlive them: a new goroutine per RPC grows
// its stack, copying it, several times on every call.
func TestRPCsReuseGoroutines(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		mu.Lock()
		seen[goroutineID()] = true
		mu.Unlock()
		return handler(ctx, req)
	}
	ts := startTCP(t, Config{ServerOptions: []grpc.ServerOption{grpc.ChainUnaryInterceptor(record)}})
	health := healthpb.NewHealthClient(dialConn(t, ts.addr, nil))
	const calls = 4 * streamWorkers
	for range calls {
		if _, err := health.Check(rpcCtx(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Each call goes to the worker that waited longest, so all of them
	// serve; a call that found none waiting (a worker not yet started)
	// gets a goroutine of its own, hence the slack.
	if len(seen) > 2*streamWorkers {
		t.Errorf("%d calls, one after another, ran on %d goroutines; want about the %d stream workers", calls, len(seen), streamWorkers)
	}
}

// stopUnserved ends, when the test ends, the stream workers of a Server
// that New built and no test serves or shuts down.
func stopUnserved(t testing.TB, s *Server) {
	t.Cleanup(s.grpc.Stop)
}
