package localstore

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// gate holds the first fsync its match accepts until released, with the
// error to return (nil: fsync for real). It is armed once.
type gate struct {
	match   atomic.Pointer[func(name string, isDir bool) bool]
	entered chan string
	release chan error
}

func newGate() *gate { return &gate{entered: make(chan string, 1), release: make(chan error, 1)} }

func (g *gate) arm(match func(name string, isDir bool) bool) { g.match.Store(&match) }

func (g *gate) sync(f vfs.File) error {
	if m := g.match.Load(); m != nil {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if (*m)(f.Name(), fi.IsDir()) && g.match.CompareAndSwap(m, nil) {
			g.entered <- f.Name()
			if err := <-g.release; err != nil {
				return err
			}
		}
	}
	return f.Sync()
}

// groups records the sizes of the groups a store made durable.
type groups struct {
	mu    sync.Mutex
	sizes []int
}

func (g *groups) observe(size int, _ time.Duration) {
	g.mu.Lock()
	g.sizes = append(g.sizes, size)
	g.mu.Unlock()
}

func (g *groups) max() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := 0
	for _, s := range g.sizes {
		m = max(m, s)
	}
	return m
}

func openGated(t *testing.T) (*Store, *gate, *groups) {
	t.Helper()
	g, obs := newGate(), &groups{}
	s, err := Open(t.TempDir(), withSync(g.sync), WithGroupObserver(obs.observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// A test that failed while the gate held an fsync lets it go, so that
	// Close (which waits for the put) returns.
	t.Cleanup(func() {
		select {
		case g.release <- nil:
		default:
		}
	})
	return s, g, obs
}

// waitQueued waits until n puts wait for the next group.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.sync.mu.Lock()
		q := len(s.sync.queue)
		s.sync.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d puts queued, want %d", q, n)
		}
	}
}

type putResult struct {
	a   blob.Attrs
	err error
}

func goPut(ctx context.Context, s *Store, name, data string, opts blob.PutOptions) <-chan putResult {
	c := make(chan putResult, 1)
	go func() {
		a, err := s.Put(ctx, name, []byte(data), opts)
		c <- putResult{a, err}
	}()
	return c
}

// holdPass starts a put whose pass the gate holds at its temporary file's
// fsync, so that puts made meanwhile queue for the next group.
func holdPass(t *testing.T, s *Store, g *gate, name string) <-chan putResult {
	t.Helper()
	g.arm(func(p string, isDir bool) bool { return !isDir && isTemp(s, p) })
	c := goPut(t.Context(), s, name, "blocker", blob.PutOptions{})
	<-g.entered
	return c
}

// tmpFiles counts the files below tmp/.
func tmpFiles(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(s.tmpDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// isTemp reports whether path is a temporary file of s: one in tmp/, or
// an unnamed one (see vfs.FS.CreateAnon), wherever it was made.
func isTemp(s *Store, path string) bool {
	return strings.HasPrefix(path, s.tmpDir+string(filepath.Separator)) ||
		strings.HasPrefix(filepath.Base(path), "(unnamed ")
}

// TestGroupChecksConditionsInOrder: puts queued while a pass runs form the
// next group, and each condition is checked at publish, in order, so two
// compare-and-swaps (and two creates) on one name in one group cannot both
// pass.
func TestGroupChecksConditionsInOrder(t *testing.T) {
	s, g, obs := openGated(t)
	ctx := t.Context()
	a0, err := s.Put(ctx, "x", []byte("v0"), blob.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocker := holdPass(t, s, g, "blocker")
	var cs []<-chan putResult
	for _, d := range []string{"A", "B"} {
		cs = append(cs, goPut(ctx, s, "x", d, blob.PutOptions{IfMatch: a0.ETag}))
	}
	for _, d := range []string{"C", "D"} {
		cs = append(cs, goPut(ctx, s, "dir/y", d, blob.PutOptions{IfNoneMatch: true}))
	}
	waitQueued(t, s, len(cs))
	g.release <- nil
	if r := <-blocker; r.err != nil {
		t.Fatal(r.err)
	}
	var res []putResult
	for _, c := range cs {
		res = append(res, <-c)
	}
	for _, pair := range [][2]int{{0, 1}, {2, 3}} {
		won := 0
		for _, i := range pair {
			switch r := res[i]; {
			case r.err == nil:
				won++
			case !errors.Is(r.err, blob.ErrConditionFailed):
				t.Fatalf("put %d: %v, want success or ErrConditionFailed", i, r.err)
			}
		}
		if won != 1 {
			t.Fatalf("puts %v: %d won, want exactly 1 (%+v)", pair, won, res)
		}
	}
	if m := obs.max(); m != len(cs) {
		t.Fatalf("largest group %d puts, want the %d queued together", m, len(cs))
	}
	if n := tmpFiles(t, s); n != 0 {
		t.Fatalf("%d temporary files left", n)
	}
}

// TestReadsOfPendingVersionWait: a version that a group published but has
// not yet made durable is not read (Get, Head, List) nor deleted until the
// group's outcome is known; when the group fails, the reads fail with the
// store.
func TestReadsOfPendingVersionWait(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "group succeeds", true: "group fails"}[fail], func(t *testing.T) {
			s, g, _ := openGated(t)
			ctx := t.Context()
			a0, err := s.Put(ctx, "d/x", []byte("v0"), blob.PutOptions{PutID: "p0"})
			if err != nil {
				t.Fatal(err)
			}
			g.arm(dirIs(filepath.Dir(mustPath(t, s, "d/x"))))
			put := goPut(ctx, s, "d/x", "v1", blob.PutOptions{IfMatch: a0.ETag, PutID: "p1"})
			<-g.entered // renamed, its directory not yet durable

			reads := make(chan error, 5)
			go func() {
				b, _, err := s.Get(ctx, "d/x", blob.GetOptions{})
				if err == nil && string(b) != "v1" {
					err = errors.New("Get returned " + string(b))
				}
				reads <- err
			}()
			go func() { _, err := s.Head(ctx, "d/x"); reads <- err }()
			go func() { _, err := s.List(ctx, blob.ListOptions{Prefix: "d/"}); reads <- err }()
			// The put-id short-circuit: a retry of the put in flight.
			retry := goPut(ctx, s, "d/x", "v1", blob.PutOptions{IfMatch: a0.ETag, PutID: "p1"})
			waitQueued(t, s, 1)
			select {
			case err := <-reads:
				t.Fatalf("a read of the pending version returned (%v) before its group's outcome", err)
			case r := <-retry:
				t.Fatalf("a retry of the pending put returned (%+v) before its group's outcome", r)
			case <-time.After(100 * time.Millisecond):
			}
			// A read that gives up gets its context's error.
			short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			_, _, err = s.Get(short, "d/x", blob.GetOptions{})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Get giving up: %v", err)
			}

			if fail {
				g.release <- errInjected
			} else {
				g.release <- nil
			}
			r := <-put
			for range 3 {
				err := <-reads
				if fail {
					wantFailed(t, "a read of the version whose group failed", err, false)
				} else if err != nil {
					t.Fatal(err)
				}
			}
			rr := <-retry
			if fail {
				wantFailed(t, "the put", r.err, true)
				wantFailed(t, "the retried put", rr.err, false)
				return
			}
			if r.err != nil || rr.err != nil || rr.a.ETag != r.a.ETag {
				t.Fatalf("put %+v, retry %+v: want both to succeed with one ETag", r, rr)
			}
		})
	}
}

// TestDeleteOfPendingVersionWaits: a delete does not remove a version
// whose group is still in flight.
func TestDeleteOfPendingVersionWaits(t *testing.T) {
	s, g, _ := openGated(t)
	ctx := t.Context()
	g.arm(dirIs(filepath.Dir(mustPath(t, s, "d/x"))))
	put := goPut(ctx, s, "d/x", "v1", blob.PutOptions{IfNoneMatch: true})
	<-g.entered
	del := make(chan error, 1)
	go func() { del <- s.Delete(ctx, "d/x", blob.DeleteOptions{}) }()
	select {
	case err := <-del:
		t.Fatalf("Delete of the pending version returned (%v) before its group's outcome", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.release <- nil
	if r := <-put; r.err != nil {
		t.Fatal(r.err)
	}
	if err := <-del; err != nil {
		t.Fatal(err)
	}
}

// TestGivingUp: a put whose caller gives up while it waits for a group is
// withdrawn, known not applied; one whose group is in flight is in doubt.
func TestGivingUp(t *testing.T) {
	s, g, _ := openGated(t)
	inFlight, cancelInFlight := context.WithCancel(t.Context())
	g.arm(func(p string, isDir bool) bool { return !isDir && isTemp(s, p) })
	first := goPut(inFlight, s, "first", "1", blob.PutOptions{IfNoneMatch: true})
	<-g.entered

	queued, cancelQueued := context.WithCancel(t.Context())
	second := goPut(queued, s, "second", "2", blob.PutOptions{})
	waitQueued(t, s, 1)
	cancelQueued()
	r := <-second
	if !errors.Is(r.err, context.Canceled) || errors.Is(r.err, blob.ErrOutcomeUnknown) {
		t.Fatalf("put withdrawn from the queue: %v, want context.Canceled alone", r.err)
	}
	waitQueued(t, s, 0)

	cancelInFlight()
	r = <-first
	if !errors.Is(r.err, blob.ErrOutcomeUnknown) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("put whose group is in flight: %v, want ErrOutcomeUnknown", r.err)
	}
	g.release <- nil
	// The group finishes it (here it lands); a put after it waits for it.
	if _, err := s.Put(t.Context(), "after", nil, blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Head(t.Context(), "first"); err != nil {
		t.Fatalf("Head(first): %v", err)
	}
	if _, err := s.Head(t.Context(), "second"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Head(second): %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil { // waits for the syncer
		t.Fatal(err)
	}
	if n := tmpFiles(t, s); n != 0 {
		t.Fatalf("%d temporary files left", n)
	}
}

// TestFailedGroupFailsEveryPut: when a directory fsync of a group fails,
// every put of the group is in doubt, whichever directory it went to and
// whether or not its condition held, and the store has failed.
func TestFailedGroupFailsEveryPut(t *testing.T) {
	s, g, obs := openGated(t)
	ctx := t.Context()
	old, err := s.Put(ctx, "b/x", []byte("v0"), blob.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocker := holdPass(t, s, g, "blocker")
	cs := []<-chan putResult{
		goPut(ctx, s, "a/x", "1", blob.PutOptions{IfNoneMatch: true}),
		goPut(ctx, s, "b/x", "2", blob.PutOptions{IfMatch: old.ETag}),
		goPut(ctx, s, "b/x", "3", blob.PutOptions{IfMatch: old.ETag}), // loses to the one before
	}
	waitQueued(t, s, len(cs))
	g.arm(dirIs(filepath.Dir(mustPath(t, s, "a/x"))))
	g.release <- nil
	if r := <-blocker; r.err != nil {
		t.Fatal(r.err)
	}
	<-g.entered
	g.release <- errInjected
	for i, c := range cs {
		wantFailed(t, "put "+string(rune('0'+i)), (<-c).err, true)
	}
	wantFailed(t, "Failed()", s.Failed(), false)
	if obs.max() != len(cs) {
		t.Fatalf("largest group %d, want %d", obs.max(), len(cs))
	}
}

// TestCrashTestCatchesMissingBarriers proves the crash test: without either
// barrier, a crash at some step loses an acknowledged blob or leaves a
// published one torn, with unnamed temporary files and (for the default
// barrier) with named ones.
func TestCrashTestCatchesMissingBarriers(t *testing.T) {
	for bname, b := range barriers {
		for name, opt := range map[string]Option{
			"file data before publish":   func(s *Store) { s.skipFileBarrier = true },
			"directories before answers": func(s *Store) { s.skipDirBarrier = true },
		} {
			for tname, temp := range map[string]Option{"unnamed": func(*Store) {}, "named": withoutAnon} {
				if tname == "named" && b != BarrierFsync {
					continue // as for unnamed files; make test has a budget
				}
				t.Run(bname+"/"+name+"/"+tname, func(t *testing.T) {
					err, steps, _ := crashViolations(t, WithBarrier(b), opt, temp)
					if err == nil {
						t.Fatalf("without the barrier (%s), a crash at each of %d steps left nothing wrong", name, steps)
					}
					t.Logf("caught: %v", err)
				})
			}
		}
	}
}
