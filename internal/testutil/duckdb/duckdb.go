// Package duckdb runs SQL in DuckDB for tests, through DuckDB's Node.js
// API (@duckdb/node-api, whose npm package ships the native library). The
// harness installs the version test/duckdb/package-lock.json pins, with
// `npm ci` under a file lock, the way package azurite installs Azurite. It
// never skips: without Node.js and npm the test fails and says how to fix
// it.
package duckdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/flock"
)

// installTimeout bounds npm ci (the package is about 70 MB unpacked).
const installTimeout = 10 * time.Minute

var installMu sync.Mutex

// Query runs sql in a fresh in-memory DuckDB and returns its rows, as
// DuckDB converts them to JSON: BIGINTs and timestamps as strings, lists
// as arrays, maps as arrays of {"key", "value"} objects.
func Query(t testing.TB, sql string) []map[string]any {
	t.Helper()
	dir, err := ensureInstalled()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(dir, "query.js"), sql)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("duckdb: %v\nquery: %s\n%s", err, sql, stderr.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &rows); err != nil {
		t.Fatalf("duckdb: output of %s: %v\n%s", sql, err, stdout.String())
	}
	return rows
}

// ensureInstalled returns test/duckdb with the pinned package installed.
func ensureInstalled() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("duckdb: Node.js is not installed (node is not on PATH). The export tests read Parquet with " +
			"DuckDB's Node.js package. Install Node.js 20 and npm (Debian/Ubuntu: apt-get install nodejs npm) and run `make test` again")
	}
	dir, err := packageDir()
	if err != nil {
		return "", err
	}
	installMu.Lock()
	defer installMu.Unlock()
	want, err := pinned(dir)
	if err != nil {
		return "", err
	}
	if installed(dir) == want {
		return dir, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("duckdb: %s/node_modules is missing and npm is not installed. Install npm (Debian/Ubuntu: apt-get install npm), or run `make test`", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	lock := flock.New(filepath.Join(dir, ".install.lock"))
	locked, err := lock.TryLockContext(ctx, 250*time.Millisecond)
	if err != nil || !locked {
		return "", fmt.Errorf("duckdb: locking %s: %v", lock.Path(), err)
	}
	defer func() { _ = lock.Unlock() }()
	if installed(dir) == want {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("duckdb: npm ci in %s: %w\n%s", dir, err, out)
	}
	if got := installed(dir); got != want {
		return "", fmt.Errorf("duckdb: after npm ci in %s, @duckdb/node-api is %q, want %q", dir, got, want)
	}
	return dir, nil
}

const pkg = "@duckdb/node-api"

func pinned(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("duckdb: %w", err)
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return "", fmt.Errorf("duckdb: %s/package-lock.json: %w", dir, err)
	}
	v := lock.Packages["node_modules/"+pkg].Version
	if v == "" {
		return "", fmt.Errorf("duckdb: %s/package-lock.json pins no %s", dir, pkg)
	}
	return v, nil
}

// installed returns the version of a finished install, or "": npm writes
// node_modules/.package-lock.json last.
func installed(dir string) string {
	nm := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(nm, ".package-lock.json")); err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(nm, pkg, "package.json"))
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Version
}

// packageDir finds test/duckdb above the working directory or this file.
func packageDir() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			p := filepath.Join(d, "test", "duckdb")
			if _, err := os.Stat(filepath.Join(p, "package.json")); err == nil {
				return p, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", fmt.Errorf("duckdb: cannot find test/duckdb/package.json above %q", starts)
}
