package localstore

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// pendingRemovals returns how many removals made in dir no finished sync
// covers yet.
func pendingRemovals(s *Store, dir string) uint64 {
	s.removals.mu.Lock()
	defer s.removals.mu.Unlock()
	if d := s.removals.dirs[dir]; d != nil {
		return d.removed - d.synced
	}
	return 0
}

// distinctStripes returns n names in directory d whose deletes take
// different locks, so that they can all be in flight at once.
func distinctStripes(s *Store, n int) []string {
	var names []string
	seen := map[*sync.Mutex]bool{}
	for i := 0; len(names) < n; i++ {
		name := fmt.Sprintf("d/%d", i)
		if mu := s.stripe(name); !seen[mu] {
			seen[mu] = true
			names = append(names, name)
		}
	}
	return names
}

// TestConcurrentDeletesShareDirectorySync: deletes made in one directory
// while its sync is in flight all wait for it, and then share one more
// sync, which each waits for before returning.
func TestConcurrentDeletesShareDirectorySync(t *testing.T) {
	const n = 8
	var (
		syncs   atomic.Int32
		dirPath atomic.Pointer[string]
		entered = make(chan struct{}, 2)
		release = make(chan struct{}, 2)
	)
	count := func(f vfs.File) error {
		if p := dirPath.Load(); p != nil && f.Name() == *p {
			if syncs.Add(1) <= 2 { // the first and the one shared
				entered <- struct{}{}
				<-release
			}
		}
		return f.Sync()
	}
	s, err := Open(t.TempDir(), withSync(count))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(func() { // a failed test lets held syncs go, so that Close returns
		dirPath.Store(nil)
		close(release)
	})
	ctx := t.Context()
	names := distinctStripes(s, n)
	// The last one stays, so that d is not pruned.
	for _, name := range append(names, "d/keep") {
		if _, err := s.Put(ctx, name, []byte("x"), blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Dir(mustPath(t, s, names[0]))
	dirPath.Store(&dir)

	dels := make(chan error, n)
	del := func(i int) { go func() { dels <- s.Delete(ctx, names[i], blob.DeleteOptions{}) }() }
	del(0)
	<-entered // the first delete's sync is in flight
	for i := 1; i < n; i++ {
		del(i)
	}
	for deadline := time.Now().Add(10 * time.Second); pendingRemovals(s, dir) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d removals wait for a sync, want %d", pendingRemovals(s, dir), n)
		}
	}
	select {
	case err := <-dels:
		t.Fatalf("a delete returned (%v) while the sync its removal needs had not started", err)
	case <-time.After(50 * time.Millisecond):
	}
	release <- struct{}{}
	<-dels // the first delete's removal is durable now
	<-entered
	select {
	case err := <-dels:
		t.Fatalf("a delete returned (%v) before the sync of its removal ended", err)
	case <-time.After(50 * time.Millisecond):
	}
	release <- struct{}{}
	dirPath.Store(nil)
	for range n - 1 {
		if err := <-dels; err != nil {
			t.Fatal(err)
		}
	}
	if got := syncs.Load(); got != 2 {
		t.Fatalf("%d deletes in one directory took %d syncs of it, want 2 (one in flight, one shared)", n, got)
	}
}

// deleteCrashPoint is what a crash after one file-system operation of
// deleteCrashWorkload would leave, with the deletes acknowledged before it.
type deleteCrashPoint struct {
	op      string
	fs      *vfs.MemFS
	deleted map[string]bool
}

// deleteCrashWorkload puts blobs in one directory, durably, and then
// deletes them all from several goroutines at once on a strict in-memory
// file system, holding each sync of the directory until others' removals
// wait behind it, so that they share the next. It returns what a crash
// after each file-system operation of the deletes would leave, the names,
// and the most removals one sync covered.
func deleteCrashWorkload(t *testing.T, opts ...Option) ([]deleteCrashPoint, []string, uint64) {
	t.Helper()
	const deleters, each = 4, 4
	mem := durableDataDir(t)
	s := openOn(t, mem, opts...)
	var names []string
	for i := range deleters * each {
		n := fmt.Sprintf("shards/s/_l/%016x", i+1)
		if _, err := s.Put(t.Context(), n, crashContent(n, 1), blob.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	dir := filepath.Dir(mustPath(t, s, names[0]))
	var (
		mu         sync.Mutex
		deleted    = map[string]bool{}
		points     []deleteCrashPoint
		maxPending uint64
	)
	mem.SetHook(func(op, path string) {
		mu.Lock()
		hold := maxPending < 3
		mu.Unlock()
		if op == "sync" && path == dir && hold {
			// Inside a sync: let the other deletes' removals queue.
			for end := time.Now().Add(time.Second); time.Now().Before(end) && pendingRemovals(s, dir) < 3; {
				time.Sleep(100 * time.Microsecond)
			}
			mu.Lock()
			maxPending = max(maxPending, pendingRemovals(s, dir))
			mu.Unlock()
		}
		mu.Lock()
		d := maps.Clone(deleted)
		mu.Unlock()
		strict, eager := mem.CrashClone(), mem.CrashCloneMetadataDurable()
		mu.Lock()
		points = append(points,
			deleteCrashPoint{op: op + " " + path, fs: strict, deleted: d},
			deleteCrashPoint{op: op + " " + path + " (directories' entries durable)", fs: eager, deleted: d})
		mu.Unlock()
	})
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for w := range deleters {
		wg.Go(func() {
			for _, n := range names[w*each : (w+1)*each] {
				if err := s.Delete(t.Context(), n, blob.DeleteOptions{}); err != nil {
					errs <- fmt.Errorf("Delete(%s): %w", n, err)
					return
				}
				mu.Lock()
				deleted[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	mem.SetHook(nil)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return points, names, maxPending
}

// checkDeleteCrash opens the store on what a crash left: every blob whose
// delete was acknowledged is gone, every other one is whole or gone.
func checkDeleteCrash(p deleteCrashPoint, names []string) error {
	s, err := Open("/data", WithFS(p.fs))
	if err != nil {
		return fmt.Errorf("Open: %w", err)
	}
	defer s.Close()
	for _, n := range names {
		b, _, err := s.Get(contextTODO(), n, blob.GetOptions{})
		switch {
		case errors.Is(err, blob.ErrNotFound):
		case err != nil:
			return fmt.Errorf("%s: %w", n, err)
		case p.deleted[n]:
			return fmt.Errorf("%s: present, but its delete was acknowledged", n)
		default:
			if _, err := crashVersion(n, b); err != nil {
				return err
			}
		}
	}
	return nil
}

func deleteCrashViolation(t *testing.T, opts ...Option) (first error, steps int, maxGroup uint64) {
	points, names, maxGroup := deleteCrashWorkload(t, opts...)
	for _, p := range points {
		if err := checkDeleteCrash(p, names); err != nil {
			return fmt.Errorf("crash after %s: %w", p.op, err), len(points) / 2, maxGroup
		}
	}
	return nil, len(points) / 2, maxGroup
}

// TestDeleteCrashAtEveryStep crashes concurrent deletes of one directory,
// whose removals share directory syncs, after every file-system
// operation: no acknowledged delete comes back.
func TestDeleteCrashAtEveryStep(t *testing.T) {
	err, steps, maxGroup := deleteCrashViolation(t)
	if err != nil {
		t.Fatal(err)
	}
	if maxGroup < 3 {
		t.Fatalf("no sync covered more than %d removals: the test did not crash mid-group", maxGroup)
	}
	t.Logf("checked a crash after each of %d steps; one sync covered up to %d removals", steps, maxGroup)
}

// TestDeleteCrashTestCatchesMissingSync proves the test above: without the
// removals' directory sync, a crash brings an acknowledged delete back.
func TestDeleteCrashTestCatchesMissingSync(t *testing.T) {
	err, steps, _ := deleteCrashViolation(t, func(s *Store) { s.skipRemovalBarrier = true })
	if err == nil {
		t.Fatalf("without the removals' sync, a crash at each of %d steps left nothing wrong", steps)
	}
	t.Logf("caught: %v", err)
}

// countingFS counts the opens of blob files.
type countingFS struct {
	vfs.FS
	blobOpens atomic.Int32
}

func (c *countingFS) Open(name string) (vfs.File, error) {
	if strings.HasSuffix(name, fileSuffix) {
		c.blobOpens.Add(1)
	}
	return c.FS.Open(name)
}

// TestUnconditionalDeleteReadsNoHeader: a delete without IfMatch of a blob
// that no group in flight publishes removes it without opening it (the
// collector's deletes); one with IfMatch reads its ETag.
func TestUnconditionalDeleteReadsNoHeader(t *testing.T) {
	fsys := &countingFS{FS: vfs.NewStrictMem()}
	s := openOn(t, fsys)
	ctx := t.Context()
	a, err := s.Put(ctx, "d/x", []byte("x"), blob.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "d/y", []byte("y"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fsys.blobOpens.Store(0)
	if err := s.Delete(ctx, "d/y", blob.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := fsys.blobOpens.Load(); n != 0 {
		t.Fatalf("an unconditional delete opened the blob %d times, want 0", n)
	}
	if err := s.Delete(ctx, "d/y", blob.DeleteOptions{}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("second Delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "d/x", blob.DeleteOptions{IfMatch: a.ETag}); err != nil {
		t.Fatal(err)
	}
	if n := fsys.blobOpens.Load(); n != 1 {
		t.Fatalf("a conditional delete opened the blob %d times, want 1", n)
	}
}

// TestDeleteKeepsDirectoryKnownDurable: a delete that leaves its directory
// non-empty does not make the next put there sync the directory's parent
// again.
func TestDeleteKeepsDirectoryKnownDurable(t *testing.T) {
	var mu sync.Mutex
	var synced []string
	record := func(f vfs.File) error {
		mu.Lock()
		synced = append(synced, f.Name())
		mu.Unlock()
		return f.Sync()
	}
	s := openOn(t, vfs.NewStrictMem(), withSync(record))
	ctx := t.Context()
	for _, n := range []string{"s/_l/1", "s/_l/2"} {
		if _, err := s.Put(ctx, n, []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "s/_l/1", blob.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	synced = nil
	mu.Unlock()
	if _, err := s.Put(ctx, "s/_l/3", []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(mustPath(t, s, "s/_l/3"))
	mu.Lock()
	defer mu.Unlock()
	var dirs []string
	for _, p := range synced {
		if !strings.HasSuffix(p, fileSuffix) && !isTemp(s, p) {
			dirs = append(dirs, p)
		}
	}
	if len(dirs) != 1 || dirs[0] != dir {
		t.Fatalf("the put after a delete in %s synced the directories %q, want only it", dir, dirs)
	}
}

// TestRecreatedDirectoryIsNotTrustedDurable: a directory that Delete
// pruned while its mark was still set, made again by a put, is synced
// into its parent before the put is answered. (prune drops the mark only
// after the rmdir; this is the state in between.)
func TestRecreatedDirectoryIsNotTrustedDurable(t *testing.T) {
	mem := vfs.NewStrictMem()
	s := openOn(t, mem)
	ctx := t.Context()
	if _, err := s.Put(ctx, "s/_l/1", []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	path := mustPath(t, s, "s/_l/1")
	dir := filepath.Dir(path)
	if _, ok := s.durable.Load(dir); !ok {
		t.Fatalf("%s is not marked durable after a put in it", dir)
	}
	// What a prune leaves before it drops the mark, made durable.
	for _, p := range []string{path, dir} {
		if err := mem.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.SyncFS("/"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "s/_l/2", []byte("y"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	after, err := Open("/data", WithFS(mem.CrashClone()))
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if _, _, err := after.Get(ctx, "s/_l/2", blob.GetOptions{}); err != nil {
		t.Fatalf("a crash after the put was answered lost it: %v", err)
	}
}
