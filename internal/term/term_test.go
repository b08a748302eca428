package term

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Only a character device is a terminal: progress is rewritten in place
// there, and printed as plain lines to anything else.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	regular, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	closed, err := os.Create(filepath.Join(t.TempDir(), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	for name, w := range map[string]io.Writer{"pipe": w, "regular file": regular, "closed file": closed, "builder": &strings.Builder{}} {
		if IsTerminal(w) {
			t.Errorf("%s: a terminal, want not", name)
		}
	}
	// A character device, as a terminal is; /dev/null is one everywhere.
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer null.Close()
	if !IsTerminal(null) {
		t.Errorf("%s: not a character device, want one", os.DevNull)
	}
}
