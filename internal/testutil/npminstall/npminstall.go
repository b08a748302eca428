// Package npminstall installs the npm package a test harness runs (Azurite,
// DuckDB's Node.js API) at the version the harness directory's
// package-lock.json pins, with `npm ci` under a file lock: the test
// binaries `go test ./...` runs in parallel install it once between them.
package npminstall

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

// installTimeout bounds npm ci: about 45 s for Azurite on a cold npm cache,
// longer for DuckDB's package (about 70 MB unpacked).
const installTimeout = 10 * time.Minute

// Package is one npm package a harness pins in its directory.
type Package struct {
	// Harness starts every error message: "azurite".
	Harness string
	// Name is the npm package whose pinned version must be installed.
	Name string
	// Files are further paths, relative to the harness directory, that a
	// finished install holds (such as the link to the package's binary).
	Files []string

	// mu serializes installation checks within one test binary; the file
	// lock serializes them across test binaries.
	mu sync.Mutex
}

// Ensure installs p in dir, running `npm ci` there unless node_modules
// already holds the pinned version. noNPM is the error message for an
// install that is needed while npm is missing.
func (p *Package) Ensure(dir, noNPM string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	want, err := p.Pinned(dir)
	if err != nil {
		return err
	}
	if p.Installed(dir) == want {
		return nil
	}

	if _, err := exec.LookPath("npm"); err != nil {
		return errors.New(noNPM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	lock := flock.New(filepath.Join(dir, ".install.lock"))
	locked, err := lock.TryLockContext(ctx, 250*time.Millisecond)
	if err != nil || !locked {
		return fmt.Errorf("%s: locking %s: %v", p.Harness, lock.Path(), err)
	}
	defer func() { _ = lock.Unlock() }()
	if p.Installed(dir) == want { // another test binary installed it meanwhile
		return nil
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: npm ci in %s: %w\n%s", p.Harness, dir, err, out)
	}
	if got := p.Installed(dir); got != want {
		return fmt.Errorf("%s: after npm ci in %s, %s is %q, want %q", p.Harness, dir, p.Name, got, want)
	}
	return nil
}

// Pinned reads the version of p that dir's package-lock.json pins.
func (p *Package) Pinned(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.Harness, err)
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return "", fmt.Errorf("%s: %s/package-lock.json: %w", p.Harness, dir, err)
	}
	v := lock.Packages["node_modules/"+p.Name].Version
	if v == "" {
		return "", fmt.Errorf("%s: %s/package-lock.json pins no %s", p.Harness, dir, p.Name)
	}
	return v, nil
}

// Installed returns the version of p a complete install in dir holds, or
// "". npm writes node_modules/.package-lock.json last, so its presence
// marks an install that finished.
func (p *Package) Installed(dir string) string {
	nm := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(nm, ".package-lock.json")); err != nil {
		return ""
	}
	for _, f := range p.Files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return ""
		}
	}
	b, err := os.ReadFile(filepath.Join(nm, p.Name, "package.json"))
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

// RepoRoot returns the repository root that holds the harness directory
// rel (such as "test/azurite", with a package.json): the first directory
// with a go.mod above the working directory (go test runs in the package
// directory), or else above this source file, whose rel is there.
func RepoRoot(harness, rel string) (string, error) {
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
				if _, err := os.Stat(filepath.Join(d, rel, "package.json")); err == nil {
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
	return "", fmt.Errorf("%s: cannot find the repository root (a go.mod beside %s/package.json) above %q", harness, filepath.ToSlash(rel), starts)
}
