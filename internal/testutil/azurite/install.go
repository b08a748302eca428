package azurite

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"

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

// repoRoot is the directory holding go.mod and test/azurite.
func repoRoot() (string, error) {
	return npminstall.RepoRoot("azurite", filepath.Join("test", "azurite"))
}
