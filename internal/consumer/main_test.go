package consumer

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests race committers on goroutines and start Azurite; none may
// outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
