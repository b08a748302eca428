package azurite

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/rolloutd/rolloutd/internal/testutil/npminstall"
)

// npmPackage is Azurite as test/azurite pins it; a finished install holds
// the link to its blob service.
var npmPackage = &npminstall.Package{
	Harness: "azurite",
	Name:    "azurite",
	Files:   []string{blobBin},
}

// blobBin is where npm links Azurite's blob service, below test/azurite.
var blobBin = filepath.Join("node_modules", ".bin", "azurite-blob")

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
	noNPM := fmt.Sprintf("azurite: %s/node_modules is missing and npm is not installed, so the tests cannot "+
		"install Azurite. Install npm (Debian/Ubuntu: apt-get install npm), or run `make test`", dir)
	if err := npmPackage.Ensure(dir, noNPM); err != nil {
		return "", err
	}
	return dir, nil
}

func binPath(dir string) string {
	return filepath.Join(dir, blobBin)
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
