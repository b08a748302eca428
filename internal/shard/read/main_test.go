package read

import (
	"testing"

	"go.uber.org/goleak"
)

// The read path's behaviour is tested through the shard package, whose
// writers make the shards it reads; this holds the package to goleak
// should tests of its own come.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
