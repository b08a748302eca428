package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// config is what the watched file configures: its text, if it is not
// "bad".
type config struct {
	mu  sync.Mutex
	val string
}

func (c *config) load(contents [][]byte) error {
	s := string(contents[0])
	if strings.HasPrefix(s, "bad") {
		return errors.New("invalid: " + s)
	}
	c.mu.Lock()
	c.val = s
	c.mu.Unlock()
	return nil
}

func (c *config) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.val
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestNewFailsOnBadOrMissingFile(t *testing.T) {
	dir := t.TempDir()
	var c config
	if _, err := New([]string{filepath.Join(dir, "missing")}, 0, c.load, nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(dir, "f")
	write(t, p, "bad from the start")
	if _, err := New([]string{p}, 0, c.load, nil); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("invalid file: %v", err)
	}
	if _, err := New(nil, 0, c.load, nil); !errors.Is(err, ErrNoFiles) {
		t.Errorf("no files: %v", err)
	}
}

// A change is applied; a bad change is rejected with one log line and the
// old configuration stays; fixing the file applies it.
func TestCheckKeepsOldOnBadChange(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "v1")
	core, logs := observer.New(zap.InfoLevel)
	var c config
	w, err := New([]string{p}, 0, c.load, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	if changed, err := w.Check(); changed || err != nil {
		t.Errorf("unchanged file: changed %v, %v", changed, err)
	}
	write(t, p, "v2")
	if changed, err := w.Check(); !changed || err != nil || c.get() != "v2" {
		t.Errorf("changed file: changed %v, %v, config %q", changed, err, c.get())
	}
	write(t, p, "bad v3")
	if changed, err := w.Check(); changed || err == nil {
		t.Errorf("bad change: changed %v, %v", changed, err)
	}
	for range 2 { // the same bad contents again: nothing new to apply or log
		if changed, err := w.Check(); changed || err != nil {
			t.Errorf("same bad change again: changed %v, %v", changed, err)
		}
	}
	if c.get() != "v2" {
		t.Errorf("config %q after a bad change, want v2 kept", c.get())
	}
	if n := logs.FilterMessageSnippet("rejected").Len(); n != 1 {
		t.Errorf("%d rejection lines for one bad change, want 1", n)
	}
	if _, failures := w.Stats(); failures != 1 {
		t.Errorf("failures %d, want 1", failures)
	}

	// A missing file (mid-replacement) keeps v2 too, logged once.
	os.Remove(p)
	for range 3 {
		if _, err := w.Check(); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing file: %v", err)
		}
	}
	if n := logs.FilterMessageSnippet("cannot read").Len(); n != 1 {
		t.Errorf("%d read-error lines, want 1", n)
	}
	write(t, p, "v4")
	if changed, err := w.Check(); !changed || err != nil || c.get() != "v4" {
		t.Errorf("fixed file: changed %v, %v, config %q", changed, err, c.get())
	}
	if loads, _ := w.Stats(); loads != 3 {
		t.Errorf("loads %d, want 3 (v1, v2, v4)", loads)
	}
}

// Moving bytes from one file to the other is a change.
func TestHashCoversEveryFile(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write(t, a, "xy")
	write(t, b, "z")
	var got []string
	w, err := New([]string{a, b}, 0, func(c [][]byte) error {
		got = append(got, string(c[0])+"|"+string(c[1]))
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write(t, a, "x")
	write(t, b, "yz")
	if changed, _ := w.Check(); !changed {
		t.Errorf("moving a byte between files was not seen: %v", got)
	}
}

// The polling goroutine picks a change up by itself, and Close stops it.
func TestPollingPicksUpChanges(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "v1")
	var c config
	w, err := New([]string{p}, 5*time.Millisecond, c.load, nil)
	if err != nil {
		t.Fatal(err)
	}
	write(t, p, "v2")
	deadline := time.Now().Add(10 * time.Second)
	for c.get() != "v2" {
		if time.Now().After(deadline) {
			t.Fatal("the change was not picked up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.Close()
	w.Close()
}

// OnApply subscribers run after each applied change, with the new
// configuration already in force, and never after a rejected or unchanged
// one; an unregistered subscriber is not called again.
func TestOnApply(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "v1")
	var c config
	w, err := New([]string{p}, -1, c.load, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var seenA, seenB []string
	unregA := w.OnApply(func() { seenA = append(seenA, c.get()) })
	w.OnApply(func() { seenB = append(seenB, c.get()) })

	write(t, p, "v2")
	w.Check()
	w.Check() // unchanged
	write(t, p, "bad v3")
	w.Check() // rejected
	unregA()
	unregA() // twice is harmless
	write(t, p, "v4")
	w.Check()
	if got := strings.Join(seenA, ","); got != "v2" {
		t.Errorf("subscriber A saw %q, want v2 (unregistered before v4)", got)
	}
	if got := strings.Join(seenB, ","); got != "v2,v4" {
		t.Errorf("subscriber B saw %q, want v2,v4", got)
	}
}
