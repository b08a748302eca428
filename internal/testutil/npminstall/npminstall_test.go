package npminstall

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRepoRoot(t *testing.T) {
	for _, rel := range []string{"test/azurite", "test/duckdb"} {
		root, err := RepoRoot("h", filepath.FromSlash(rel))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			t.Errorf("RepoRoot(%q) = %s, which holds no go.mod", rel, root)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel), "package.json")); err != nil {
			t.Errorf("RepoRoot(%q) = %s, which holds no %s/package.json", rel, root, rel)
		}
	}
	if root, err := RepoRoot("h", filepath.Join("test", "no-such-harness")); err == nil || !strings.HasPrefix(err.Error(), "h: ") {
		t.Errorf("RepoRoot of a missing harness = %q, %v; want an error naming the harness", root, err)
	}
}
