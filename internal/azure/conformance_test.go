package azure

import (
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
)

// TestConformance runs the shared blob.Store suite against Azurite, with one
// Store for every subtest, as the service uses it.
func TestConformance(t *testing.T) {
	s := newTestStore(t, testConfig("conformance"))
	blobtest.Run(t, func(*testing.T) blob.Store { return s })
}
