package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
	"github.com/rolloutd/rolloutd/internal/testutil/ledger"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

var (
	binary string            // the rolloutd binary under test
	az     *azurite.Instance // shared by the package's tests
)

// TestMain builds the real binary (with -race when the tests have it) and
// starts one Azurite for the package. goleak checks the test process after
// Azurite has stopped.
func TestMain(m *testing.M) {
	code, err := testMain(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func testMain(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "rolloutd-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if binary, err = rolloutdproc.Build(dir); err != nil {
		return 0, err
	}
	az, err = azurite.StartMain(azurite.Options{})
	if err != nil {
		return 0, err
	}
	code := m.Run()
	az.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code, nil
}

// proc is one running rolloutd.
type proc = rolloutdproc.Proc

// start starts rolloutd with args (listeners on free loopback ports) and
// env, and waits until its health check reports SERVING.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return rolloutdproc.Start(t, binary, rolloutdproc.Options{Args: args, Env: env, StartTimeout: 30 * time.Second})
}

// azureEnv is the environment that points rolloutd at a fresh container
// of the package's Azurite.
func azureEnv(t *testing.T) (env []string, store string) {
	var b [4]byte
	rand.Read(b[:])
	return []string{"AZURE_STORAGE_CONNECTION_STRING=" + az.ConnectionString}, "azblob://e2e-" + hex.EncodeToString(b[:])
}

// readStore opens the container of store directly, to inspect what the
// servers wrote.
func readStore(t *testing.T, store string) *azure.Store {
	t.Helper()
	s, err := azure.New(context.Background(), azure.Config{Container: strings.TrimPrefix(store, "azblob://"), ConnectionString: az.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var appendOne = ledger.AppendOne
