// Package duckdb runs SQL in DuckDB for tests, through DuckDB's Node.js
// API (@duckdb/node-api, whose npm package ships the native library). The
// harness installs the version test/duckdb/package-lock.json pins, with
// `npm ci` under a file lock (package npminstall, as for Azurite). It
// never skips: without Node.js and npm the test fails and says how to fix
// it.
package duckdb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/testutil/npminstall"
)

// npmPackage is DuckDB's Node.js API as test/duckdb pins it.
var npmPackage = &npminstall.Package{Harness: "duckdb", Name: "@duckdb/node-api"}

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
	noNPM := fmt.Sprintf("duckdb: %s/node_modules is missing and npm is not installed. Install npm (Debian/Ubuntu: apt-get install npm), or run `make test`", dir)
	if err := npmPackage.Ensure(dir, noNPM); err != nil {
		return "", err
	}
	return dir, nil
}

// packageDir finds test/duckdb below the repository root.
func packageDir() (string, error) {
	rel := filepath.Join("test", "duckdb")
	root, err := npminstall.RepoRoot("duckdb", rel)
	if err != nil {
		return "", err
	}
	return filepath.Join(root, rel), nil
}
