package localstore

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// TestPutStartsWriteBackBeforeItsGroup: every put, create-only (an unnamed
// file) or not (a named one in tmp/), starts its temporary file's
// write-back once, when written and before the group's fsync of it, so
// that the group's fsyncs find the data on its way and share a journal
// commit (docs/performance.md, "The embedded local store").
func TestPutStartsWriteBackBeforeItsGroup(t *testing.T) {
	var mu sync.Mutex
	var events []string
	record := func(ev string) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	s, err := Open(t.TempDir(),
		withSync(func(f vfs.File) error { record("sync " + f.Name()); return f.Sync() }),
		withWriteBack(func(f vfs.File) { record("writeback " + f.Name()); vfs.StartWriteBack(f) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	a, err := s.Put(ctx, "shards/a/_l/1", []byte("x"), blob.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "shards/a/_manifest", []byte("m"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "shards/a/_l/1", []byte("y"), blob.PutOptions{IfNoneMatch: true}); err == nil {
		t.Fatalf("second create of shards/a/_l/1 (first %+v) succeeded", a)
	}
	mu.Lock()
	defer mu.Unlock()
	var started []string
	for i, ev := range events {
		name, ok := strings.CutPrefix(ev, "writeback ")
		if !ok {
			continue
		}
		if slices.Contains(started, name) {
			t.Errorf("write-back of %s started twice", name)
		}
		started = append(started, name)
		if j := slices.Index(events, "sync "+name); j >= 0 && j < i {
			t.Errorf("write-back of %s started after its fsync", name)
		}
	}
	if len(started) != 3 {
		t.Fatalf("write-back started for %d temporary files, want 3 (one per put): %q", len(started), events)
	}
	for _, name := range started {
		if !slices.Contains(events, "sync "+name) {
			t.Errorf("%s: write-back started but never fsynced: %q", name, events)
		}
	}
}
