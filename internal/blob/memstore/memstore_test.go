package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(*testing.T) blob.Store { return memstore.New() })
}

// TestConformanceShared runs the suite against one store shared by every
// subtest, as the Azurite tests do.
func TestConformanceShared(t *testing.T) {
	s := memstore.New()
	blobtest.Run(t, func(*testing.T) blob.Store { return s })
}
