package client_test

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolloutd/rolloutd/client"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	rserver "github.com/rolloutd/rolloutd/internal/server"
)

// TestMain runs the tests, and then checks that they left no goroutine
// behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is one rolloutd in this process: internal/server, configured as
// the binary configures it, on the embedded store in dir and a loopback
// port. It starts in milliseconds, where building and starting the binary
// took most of this package's time; the tests that need the binary itself
// live in cmd/rolloutd and internal/reliability.
type server struct {
	GRPCAddr string
	dir      string
	srv      *rserver.Server
	store    *localstore.Store
	served   chan error
	stopped  bool
}

// startServer starts rolloutd on a fresh embedded store, with the binary's
// flags args: --listen, --max-record-bytes, --append-rate-limit,
// --append-rate-burst and --subscribe-watch-interval are the ones the tests
// use.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	return startOn(t, dir, args...)
}

// startOn starts rolloutd on the embedded store in dir; it shuts down when
// the test ends.
func startOn(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	return startWith(t, dir, nil, args...)
}

// startObserved is startOn, and also records the server's log lines in
// the returned logs, for tests that read what it logged.
func startObserved(t *testing.T, dir string, args ...string) (*server, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	return startWith(t, dir, func(cfg *rserver.Config) {
		cfg.Logger = zap.New(zapcore.NewTee(cfg.Logger.Core(), core))
	}, args...), logs
}

func startWith(t *testing.T, dir string, configure func(*rserver.Config), args ...string) *server {
	t.Helper()
	store, err := localstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, addr := serverConfig(t, args)
	cfg.Store = store
	if configure != nil {
		configure(&cfg)
	}
	srv, err := rserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{GRPCAddr: lis.Addr().String(), dir: dir, srv: srv, store: store, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(lis) }()
	t.Cleanup(func() { s.shutdown(t, 10*time.Second) })
	return s
}

// serverConfig is what the binary makes of args (and its defaults), and
// the address to listen on.
func serverConfig(t *testing.T, args []string) (rserver.Config, string) {
	t.Helper()
	cfg := rserver.Config{
		Logger:           zaptest.NewLogger(t),
		Registerer:       prometheus.NewRegistry(),
		DrainDelay:       100 * time.Millisecond, // rolloutdproc's --drain-delay
		MaxConnectionAge: -1,                     // the binary's default: never
	}
	addr, rate, burst := "127.0.0.1:0", 0.0, 0
	for i := 0; i+1 < len(args); i += 2 {
		v := args[i+1]
		var err error
		switch args[i] {
		case "--listen":
			addr = v
		case "--max-record-bytes":
			cfg.MaxRecordBytes, err = strconv.Atoi(v)
		case "--append-rate-limit":
			rate, err = strconv.ParseFloat(v, 64)
		case "--append-rate-burst":
			burst, err = strconv.Atoi(v)
		case "--subscribe-watch-interval":
			cfg.SubscribeWatchInterval, err = time.ParseDuration(v)
		default:
			t.Fatalf("startServer: flag %s is not mapped to the in-process server", args[i])
		}
		if err != nil {
			t.Fatalf("%s %s: %v", args[i], v, err)
		}
	}
	if len(args)%2 != 0 {
		t.Fatalf("startServer: %q is not flag-value pairs", args)
	}
	if rate > 0 {
		l, err := ratelimit.New(rate, max(burst, int(rate)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.AppendLimiter = l
	}
	return cfg, addr
}

// shutdown stops the server as SIGTERM stops the binary: a graceful
// shutdown within d, then the store closes. It is idempotent.
func (s *server) shutdown(t *testing.T, d time.Duration) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s.srv.Shutdown(ctx)
	if err := <-s.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := s.store.Close(); err != nil {
		t.Errorf("close the store: %v", err)
	}
}

// newClient connects to addr; the client is closed when the test ends.
func newClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
