package reliability

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// The rolloutd binary is built once per package run, on first use.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// rolloutdBinary builds cmd/rolloutd once per package run, with the race
// detector when the tests have it, and returns its path.
func rolloutdBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rolloutd-reliability-")
		if err != nil {
			binErr = err
			return
		}
		atExit = append(atExit, func() { os.RemoveAll(dir) })
		binPath, binErr = rolloutdproc.Build(dir)
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is one running rolloutd binary.
type proc = rolloutdproc.Proc

// startProc starts the rolloutd binary on the container (listeners on free
// loopback ports) with extra flags, and waits until it reports SERVING.
func startProc(t testing.TB, name, container string, args ...string) *proc {
	t.Helper()
	return rolloutdproc.Start(t, rolloutdBinary(t), rolloutdproc.Options{
		Name: name,
		Args: append([]string{"--store", "azblob://" + container}, args...),
		Env:  []string{"AZURE_STORAGE_CONNECTION_STRING=" + sharedAzurite(t).ConnectionString},
	})
}

// directStore opens the container straight on Azurite, to check what the
// processes stored.
func directStore(t testing.TB, container string) *azure.Store {
	t.Helper()
	s, err := azure.New(context.Background(), azure.Config{Container: container, ConnectionString: sharedAzurite(t).ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// containerName is a fresh Azure container name for one run.
func containerName(scenario string, seed int64) string {
	return fmt.Sprintf("%s-%d-%d", scenario, seed, time.Now().UnixNano()%1_000_000)
}
