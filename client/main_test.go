package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/client"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// rolloutdBinary is the real rolloutd, built by TestMain (with -race when the
// tests have it).
var rolloutdBinary string

// TestMain builds rolloutd, runs the tests, and then checks that they left
// no goroutine behind.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rolloutd-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if rolloutdBinary, err = rolloutdproc.Build(dir); err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// server is one rolloutd process on the embedded store in dir.
type server struct {
	*rolloutdproc.Proc
	dir string
}

// startServer starts rolloutd on a fresh embedded store, with args added
// (a later --listen or --store wins).
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	return startOn(t, dir, args...)
}

// startOn starts rolloutd on the embedded store in dir.
func startOn(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	p := rolloutdproc.Start(t, rolloutdBinary, rolloutdproc.Options{
		Args: append([]string{"--store", dir}, args...), DropEnv: []string{"AZURE_", "ROLLOUTD_"}, StartTimeout: 30 * time.Second,
	})
	return &server{Proc: p, dir: dir}
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
