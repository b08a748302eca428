package localstore

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// removeCounter counts the file system's removals of directories' entries
// that are directories themselves (prune's rmdirs) by path.
type removeCounter struct {
	vfs.FS
	mu     sync.Mutex
	rmdirs map[string]int
}

func (c *removeCounter) Remove(name string) error {
	if !strings.HasSuffix(name, fileSuffix) {
		c.mu.Lock()
		c.rmdirs[name]++
		c.mu.Unlock()
	}
	return c.FS.Remove(name)
}

// TestDeleteManySyncsEachDirectoryOnce: a pass of the collector's deletes
// in one directory costs one sync of it and one attempt at pruning it, not
// one each; names missing or invalid get their own error.
func TestDeleteManySyncsEachDirectoryOnce(t *testing.T) {
	var mu sync.Mutex
	dirSyncs := map[string]int{}
	count := func(f vfs.File) error {
		if fi, err := f.Stat(); err == nil && fi.IsDir() {
			mu.Lock()
			dirSyncs[f.Name()]++
			mu.Unlock()
		}
		return f.Sync()
	}
	fsys := &removeCounter{FS: vfs.NewStrictMem(), rmdirs: map[string]int{}}
	s := openOn(t, fsys, withSync(count))
	ctx := t.Context()
	var names []string
	for i := range 40 {
		n := fmt.Sprintf("shards/s/_l/%016x", i+1)
		if i%10 == 9 {
			n = fmt.Sprintf("shards/t/_l/%016x", i+1)
		}
		if _, err := s.Put(ctx, n, []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	keep := "shards/s/_l/ffffffffffffffff" // the directory stays
	if _, err := s.Put(ctx, keep, []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(dirSyncs)
	mu.Unlock()
	errs := s.DeleteMany(ctx, append(names, "shards/s/_l/missing", "bad//name"))
	for i, n := range names {
		if errs[i] != nil {
			t.Fatalf("DeleteMany: %s: %v", n, errs[i])
		}
		if _, err := s.Head(ctx, n); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("Head(%s) after DeleteMany = %v, want ErrNotFound", n, err)
		}
	}
	if err := errs[len(names)]; !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("DeleteMany of a missing name: %v, want ErrNotFound", err)
	}
	if err := errs[len(names)+1]; !errors.Is(err, blob.ErrInvalidName) {
		t.Errorf("DeleteMany of an invalid name: %v, want ErrInvalidName", err)
	}
	kept, gone := filepath.Dir(mustPath(t, s, keep)), filepath.Dir(mustPath(t, s, "shards/t/_l/0"))
	mu.Lock()
	defer mu.Unlock()
	if n := dirSyncs[kept]; n != 1 {
		t.Errorf("36 deletes in %s synced it %d times, want once", kept, n)
	}
	if n := fsys.rmdirs[kept]; n != 1 {
		t.Errorf("36 deletes in %s tried to remove it %d times, want once", kept, n)
	}
	if f, err := fsys.Open(gone); err == nil {
		_ = f.Close()
		t.Errorf("%s, emptied, was not removed", gone)
	}
}

// deleteManyCrash deletes blobs of one directory with DeleteMany, in
// batches, on a strict in-memory file system, and checks what a crash
// after each file-system operation leaves: no acknowledged delete comes
// back. It returns the first violation and the steps checked.
func deleteManyCrash(t *testing.T, opts ...Option) (error, int) {
	t.Helper()
	mem := durableDataDir(t)
	s := openOn(t, mem, opts...)
	var names []string
	for i := range 12 {
		n := fmt.Sprintf("shards/s/_l/%016x", i+1)
		if _, err := s.Put(t.Context(), n, crashContent(n, 1), blob.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	deleted := map[string]bool{}
	var points []deleteCrashPoint
	mem.SetHook(func(op, path string) {
		d := maps.Clone(deleted)
		points = append(points,
			deleteCrashPoint{op: op + " " + path, fs: mem.CrashClone(), deleted: d},
			deleteCrashPoint{op: op + " " + path + " (directories' entries durable)", fs: mem.CrashCloneMetadataDurable(), deleted: d})
	})
	for b := 0; b < len(names); b += 4 {
		batch := names[b : b+4]
		for i, err := range s.DeleteMany(t.Context(), batch) {
			if err != nil {
				t.Fatalf("DeleteMany: %s: %v", batch[i], err)
			}
			deleted[batch[i]] = true
		}
	}
	mem.SetHook(nil)
	for _, p := range points {
		if err := checkDeleteCrash(p, names); err != nil {
			return fmt.Errorf("crash after %s: %w", p.op, err), len(points) / 2
		}
	}
	return nil, len(points) / 2
}

// TestDeleteManyCrashAtEveryStep: a crash after any step of DeleteMany
// brings back no delete it acknowledged.
func TestDeleteManyCrashAtEveryStep(t *testing.T) {
	if err, steps := deleteManyCrash(t); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("checked a crash after each of %d steps", steps)
	}
}

// TestDeleteManyCrashTestCatchesMissingSync proves the test above: without
// the removals' directory sync, a crash brings an acknowledged delete back.
func TestDeleteManyCrashTestCatchesMissingSync(t *testing.T) {
	err, steps := deleteManyCrash(t, func(s *Store) { s.skipRemovalBarrier = true })
	if err == nil {
		t.Fatalf("without the removals' sync, a crash at each of %d steps left nothing wrong", steps)
	}
	t.Logf("caught: %v", err)
}

// TestDeleteManyConcurrentWithPutsAndItself: DeleteMany calls over the same
// names in opposite orders, beside puts of those names (whose groups in
// flight send some names to be deleted alone), neither deadlock nor report
// anything but success or ErrNotFound.
func TestDeleteManyConcurrentWithPutsAndItself(t *testing.T) {
	s := openOn(t, vfs.NewStrictMem())
	ctx := t.Context()
	var names []string
	for i := range 64 {
		names = append(names, fmt.Sprintf("shards/s/_l/%016x", i+1))
	}
	reversed := slices.Clone(names)
	slices.Reverse(reversed)
	done := make(chan error, 4)
	for _, order := range [][]string{names, reversed} {
		go func() {
			for range 100 {
				for i, err := range s.DeleteMany(ctx, order) {
					if err != nil && !errors.Is(err, blob.ErrNotFound) {
						done <- fmt.Errorf("DeleteMany: %s: %w", order[i], err)
						return
					}
				}
			}
			done <- nil
		}()
		go func() {
			for r := range 100 {
				n := order[r%len(order)]
				if _, err := s.Put(ctx, n, []byte("x"), blob.PutOptions{}); err != nil {
					done <- fmt.Errorf("Put(%s): %w", n, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 4 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("deadlocked")
		}
	}
}
