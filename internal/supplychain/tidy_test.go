package supplychain

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// modules are the repository's Go modules, relative to its root.
var modules = []string{".", "deploy/check"}

// repoRoot is the directory of the root module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at the repository root %s: %v", root, err)
	}
	return root
}

// goCmd runs the go command in dir, outside any workspace and with the
// toolchain that runs the tests, and returns stdout, stderr and the error.
func goCmd(t *testing.T, dir string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// TestGoModTidy fails when `go mod tidy` would change a module's go.mod or
// go.sum. It runs `go mod tidy -diff`, which changes nothing on disk.
func TestGoModTidy(t *testing.T) {
	root := repoRoot(t)
	for _, m := range modules {
		t.Run(m, func(t *testing.T) {
			dir := filepath.Join(root, m)
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
				t.Skipf("no module at %s", m)
			}
			diff, stderr, err := goCmd(t, dir, "mod", "tidy", "-diff")
			switch {
			case err == nil:
			case strings.TrimSpace(diff) != "":
				t.Errorf("go.mod or go.sum of module %s is not tidy; run `go mod tidy` in %s and review the change:\n%s", m, dir, diff)
			default:
				// No diff: tidy could not run at all (a module it could not
				// download, a broken go.mod). That is a failure too, but
				// not a tidiness verdict.
				t.Errorf("go mod tidy -diff in %s could not check the module: %v\n%s", m, err, stderr)
			}
		})
	}
}

// TestGoModVerify fails when a module in the module cache no longer matches
// the checksum that go.sum pinned when it was first downloaded.
func TestGoModVerify(t *testing.T) {
	out, stderr, err := goCmd(t, repoRoot(t), "mod", "verify")
	if err != nil {
		t.Fatalf("go mod verify: %v\n%s%s", err, out, stderr)
	}
	t.Log(strings.TrimSpace(out))
}
