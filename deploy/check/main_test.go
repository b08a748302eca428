package check

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// repoRoot is the root of the rolloutd repository (two levels up).
var repoRoot string

func TestMain(m *testing.M) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err == nil {
		_, err = os.Stat(filepath.Join(root, "deploy", "k8s", "base", "kustomization.yaml"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy/check: cannot find the repository root:", err)
		os.Exit(2)
	}
	repoRoot = root
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if imageBuild.dir != "" {
			_ = os.RemoveAll(imageBuild.dir)
		}
	}))
}
