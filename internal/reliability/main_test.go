package reliability

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// One Azurite serves the package; it starts on first use, so that
// `go test -run TestSimulatedFaults` needs none.
var (
	azOnce sync.Once
	azInst *azurite.Instance
	azErr  error

	// atExit runs after every test, before the leak check.
	atExit []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	if azInst != nil {
		if err := azInst.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop azurite:", err)
		}
	}
	for _, f := range atExit {
		f()
	}
	if code == 0 {
		if err := goleak.Find(toxiproxyLeaks...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// sharedAzurite returns the package's Azurite, starting it on first use.
func sharedAzurite(t testing.TB) *azurite.Instance {
	t.Helper()
	azOnce.Do(func() { azInst, azErr = azurite.StartMain(azurite.Options{}) })
	if azErr != nil {
		t.Fatalf("azurite: %v", azErr)
	}
	return azInst
}

// soak is how long each scenario repeats with fresh seeds
// (ROLLOUTD_SOAK=10m), or 0 for the default, bounded run.
func soak(t testing.TB) time.Duration {
	s := os.Getenv("ROLLOUTD_SOAK")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("ROLLOUTD_SOAK=%q: %v", s, err)
	}
	return d
}

// seeds runs f once per seed: ROLLOUTD_SIM_SEED alone when it is set, else
// rounds fresh seeds, or fresh seeds until the soak duration has passed.
// Each run is a subtest named by its seed, and a failing one says how to
// reproduce it.
func seeds(t *testing.T, rounds int, f func(t *testing.T, seed int64)) {
	run := func(seed int64) bool {
		return t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("FAILED with seed %d: reproduce with ROLLOUTD_SIM_SEED=%d go test -race -run '%s' ./internal/reliability", seed, seed, t.Name())
				}
			})
			t.Logf("seed %d (ROLLOUTD_SIM_SEED=%d reproduces its choices)", seed, seed)
			f(t, seed)
		})
	}
	if s := os.Getenv("ROLLOUTD_SIM_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("ROLLOUTD_SIM_SEED=%q: %v", s, err)
		}
		run(seed)
		return
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if d := soak(t); d > 0 {
		for end := time.Now().Add(d); time.Now().Before(end); seed++ {
			if !run(seed) {
				return
			}
		}
		return
	}
	for i := range rounds {
		if !run(seed + int64(i)) {
			return
		}
	}
}
