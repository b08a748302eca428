package azurite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/gofrs/flock"
)

// installTimeout bounds npm ci (about 45 s on a cold npm cache).
const installTimeout = 10 * time.Minute

// installMu serializes installation checks within one test binary; the file
// lock serializes them across the test binaries `go test ./...` runs in
// parallel.
var installMu sync.Mutex

// ensureInstalled returns test/azurite with the pinned Azurite installed in
// it, running `npm ci` there first if node_modules is missing or stale.
func ensureInstalled() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("azurite: Node.js is not installed (node is not on PATH). " +
			"The tests run Azurite, the Azure Storage emulator, which needs Node.js 20 and npm. " +
			"Install them (Debian/Ubuntu: apt-get install nodejs npm) and run `make test` or `go test ./...` again")
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "test", "azurite")

	installMu.Lock()
	defer installMu.Unlock()
	want, err := pinnedVersion(dir)
	if err != nil {
		return "", err
	}
	if installedVersion(dir) == want {
		return dir, nil
	}

	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("azurite: %s/node_modules is missing and npm is not installed, so the tests cannot "+
			"install Azurite. Install npm (Debian/Ubuntu: apt-get install npm), or run `make test`", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	lock := flock.New(filepath.Join(dir, ".install.lock"))
	locked, err := lock.TryLockContext(ctx, 250*time.Millisecond)
	if err != nil || !locked {
		return "", fmt.Errorf("azurite: locking %s: %v", lock.Path(), err)
	}
	defer func() { _ = lock.Unlock() }()
	if installedVersion(dir) == want { // another test binary installed it meanwhile
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("azurite: npm ci in %s: %w\n%s", dir, err, out)
	}
	if got := installedVersion(dir); got != want {
		return "", fmt.Errorf("azurite: after npm ci in %s, azurite is %q, want %q", dir, got, want)
	}
	return dir, nil
}

func binPath(dir string) string {
	return filepath.Join(dir, "node_modules", ".bin", "azurite-blob")
}

// pinnedVersion reads the Azurite version package-lock.json pins.
func pinnedVersion(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("azurite: %w", err)
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return "", fmt.Errorf("azurite: %s/package-lock.json: %w", dir, err)
	}
	v := lock.Packages["node_modules/azurite"].Version
	if v == "" {
		return "", fmt.Errorf("azurite: %s/package-lock.json pins no azurite", dir)
	}
	return v, nil
}

// installedVersion returns the version of a complete install, or "". npm
// writes node_modules/.package-lock.json last, so its presence marks an
// install that finished.
func installedVersion(dir string) string {
	nm := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(nm, ".package-lock.json")); err != nil {
		return ""
	}
	if _, err := os.Stat(binPath(dir)); err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(nm, "azurite", "package.json"))
	if err != nil {
		return ""
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &pkg) != nil {
		return ""
	}
	return pkg.Version
}

// repoRoot walks up to the directory holding go.mod, starting from the
// working directory (go test runs in the package directory) and falling back
// to this source file's directory.
func repoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				if _, err := os.Stat(filepath.Join(d, "test", "azurite", "package.json")); err == nil {
					return d, nil
				}
				break // another module's go.mod: try the next start
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("azurite: cannot find the repository root (a go.mod beside test/azurite/package.json) above %q", starts)
}
