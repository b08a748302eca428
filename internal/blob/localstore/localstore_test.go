package localstore_test

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string) *localstore.Store {
	t.Helper()
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the suite on the disk. Its largest case,
// ListDelimitedManyPrefixes (2,700 puts, each a file and a directory
// fsync), took 6 of make test's seconds here; its listing logic is the
// same on every file system and runs in TestConformanceOnStrictMem, so on
// the disk it runs only with ROLLOUTD_LOCALSTORE_LONG=1.
func TestConformance(t *testing.T) {
	long := os.Getenv("ROLLOUTD_LOCALSTORE_LONG") != ""
	blobtest.Run(t, func(t *testing.T) blob.Store {
		if !long && strings.HasSuffix(t.Name(), "/ListDelimitedManyPrefixes") {
			t.Skip("2,700 fsynced puts on the disk: set ROLLOUTD_LOCALSTORE_LONG=1 (the case runs on the in-memory file systems)")
		}
		return open(t, t.TempDir())
	})
}
