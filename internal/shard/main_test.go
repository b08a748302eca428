package shard

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// One Azurite serves the package; it starts on first use.
var (
	azOnce sync.Once
	azInst *azurite.Instance
	azErr  error
	azSeq  atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if azInst != nil {
		if err := azInst.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop azurite:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// azureStore returns a Store on the package's Azurite, under a prefix of its
// own so tests do not see each other's shards.
func azureStore(t testing.TB) blob.Store {
	t.Helper()
	azOnce.Do(func() { azInst, azErr = azurite.StartMain(azurite.Options{}) })
	if azErr != nil {
		t.Fatalf("azurite: %v", azErr)
	}
	s, err := azure.New(context.Background(), azure.Config{
		Container:        "shard-tests",
		Prefix:           fmt.Sprintf("t%d", azSeq.Add(1)),
		ConnectionString: azInst.ConnectionString,
	})
	if err != nil {
		t.Fatalf("azure.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// backends runs f against the in-memory store and against Azurite.
func backends(t *testing.T, f func(t *testing.T, newStore func(testing.TB) blob.Store)) {
	t.Run("memstore", func(t *testing.T) { f(t, func(testing.TB) blob.Store { return memstore.New() }) })
	t.Run("azurite", func(t *testing.T) { f(t, azureStore) })
}
