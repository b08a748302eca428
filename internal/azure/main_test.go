package azure

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// az is the package's one Azurite, shared by every test and benchmark.
var az *azurite.Instance

// withAzurite runs the tests between starting and stopping Azurite, so that
// goleak checks for leaks after Azurite's own goroutines are gone.
type withAzurite struct{ m *testing.M }

func (w withAzurite) Run() int {
	inst, err := azurite.StartMain(azurite.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	az = inst
	code := w.m.Run()
	if err := inst.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// Every Store a test builds is closed in its cleanup, which closes its idle
// connections; no goroutine may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withAzurite{m}) }

// testConfig is a Config for the shared Azurite with fast retries.
func testConfig(container string) Config {
	return Config{
		Container:        container,
		ConnectionString: az.ConnectionString,
		RetryDelay:       5 * time.Millisecond,
		MaxRetryDelay:    20 * time.Millisecond,
		TryTimeout:       10 * time.Second,
	}
}

func newTestStore(tb testing.TB, cfg Config) *Store {
	tb.Helper()
	if cfg.ConnectionString == "" && cfg.AccountURL == "" {
		cfg.ConnectionString = az.ConnectionString
	}
	if cfg.Logger == nil {
		if t, ok := tb.(*testing.T); ok {
			cfg.Logger = zaptest.NewLogger(t)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// uniqueContainer returns a fresh valid container name.
func uniqueContainer(kind string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return kind + "-" + hex.EncodeToString(b[:])
}
