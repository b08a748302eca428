package localstore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// crashContent is version v of the blob name: self-describing, so that a
// blob that is torn, empty or another's shows.
func crashContent(name string, v int) []byte {
	unit := fmt.Sprintf("%s v%d;", name, v)
	return []byte(strings.Repeat(unit, 1+300/len(unit)))
}

// crashVersion returns the version b holds of name, or an error when b is
// not exactly some version's content.
func crashVersion(name string, b []byte) (int, error) {
	rest, ok := strings.CutPrefix(string(b), name+" v")
	if !ok {
		return 0, fmt.Errorf("%q is not a version of %s", trunc(b), name)
	}
	num, _, _ := strings.Cut(rest, ";")
	v, err := strconv.Atoi(num)
	if err != nil || !bytes.Equal(b, crashContent(name, v)) {
		return 0, fmt.Errorf("%q is not a whole version of %s", trunc(b), name)
	}
	return v, nil
}

func trunc(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "…"...)
	}
	return b
}

// crashPoint is what a crash after one file-system operation would leave,
// and the versions acknowledged before it. Each step has two: only what
// was synced, and that with every directory's current entries durable
// too (see vfs.MemFS.CrashCloneMetadataDurable).
type crashPoint struct {
	step  int
	op    string
	fs    *vfs.MemFS
	acked map[string]int
}

// crashWorkload runs writers that each create blobs in a directory of
// their own (created by the first put) and compare-and-swap a blob in a
// shared directory, concurrently, on a strict in-memory file system, and
// returns what a crash after each file-system operation would leave. Each
// writer puts sequentially, so the versions it acknowledged are known at
// every step.
func crashWorkload(t *testing.T, writers, rounds int, opts ...Option) ([]crashPoint, int) {
	t.Helper()
	mem := durableDataDir(t)
	obs := &groups{}
	s := openOn(t, mem, append(opts, WithGroupObserver(obs.observe))...)
	var (
		mu     sync.Mutex
		acked  = map[string]int{}
		points []crashPoint
	)
	mem.SetHook(func(op, path string) {
		if (op == "sync" || op == "syncfs") && obs.max() < 2 && inflightPuts(s) < 2 {
			// A pass of one put is syncing: hold it until puts queue
			// behind it, so that the next pass is a group of several
			// however the machine schedules the writers. A pass that
			// holds several is such a group already; holding it would
			// only wait out the timeout, since its writers are all
			// waiting for it and none can queue.
			awaitQueue(s, 2, time.Second)
		}
		// The acknowledgements first, then the clone: everything
		// acknowledged before the clone was synced before it.
		mu.Lock()
		a := maps.Clone(acked)
		mu.Unlock()
		strict, eager := mem.CrashClone(), mem.CrashCloneMetadataDurable()
		mu.Lock()
		points = append(points,
			crashPoint{step: len(points) / 2, op: op + " " + path, fs: strict, acked: a},
			crashPoint{step: len(points) / 2, op: op + " " + path + " (directories' entries durable)", fs: eager, acked: a})
		mu.Unlock()
	})
	ack := func(name string, v int) {
		mu.Lock()
		acked[name] = v
		mu.Unlock()
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			m := fmt.Sprintf("shared/m%d", w)
			var etag blob.ETag
			for r := 1; r <= rounds; r++ {
				g := fmt.Sprintf("w%d/g/%d", w, r)
				if _, err := s.Put(t.Context(), g, crashContent(g, 1), blob.PutOptions{IfNoneMatch: true, PutID: g}); err != nil {
					errs <- fmt.Errorf("Put(%s): %w", g, err)
					return
				}
				ack(g, 1)
				a, err := s.Put(t.Context(), m, crashContent(m, r), blob.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""})
				if err != nil {
					errs <- fmt.Errorf("Put(%s) v%d: %w", m, r, err)
					return
				}
				ack(m, r)
				etag = a.ETag
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mem.SetHook(nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return points, obs.max()
}

// inflightPuts is the number of puts of the pass in flight (0: none).
func inflightPuts(s *Store) int {
	g := s.sync.inflight.Load()
	if g == nil {
		return 0
	}
	n := 0
	for _, v := range g.versions {
		n += len(v)
	}
	return n
}

// awaitQueue waits until n puts wait for the next pass, or for d.
func awaitQueue(s *Store, n int, d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		s.sync.mu.Lock()
		q := len(s.sync.queue)
		s.sync.mu.Unlock()
		if q >= n {
			return
		}
	}
}

// checkCrash opens the store on what a crash left and checks that every
// blob is absent or one whole version, and that every acknowledged version
// (or a later one) is there.
func checkCrash(p crashPoint, names []string) error {
	s, err := Open("/data", WithFS(p.fs))
	if err != nil {
		return fmt.Errorf("Open: %w", err)
	}
	defer s.Close()
	ctx := contextTODO()
	for _, n := range names {
		b, _, err := s.Get(ctx, n, blob.GetOptions{})
		if errors.Is(err, blob.ErrNotFound) {
			if v := p.acked[n]; v > 0 {
				return fmt.Errorf("%s: absent, but version %d was acknowledged", n, v)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		v, err := crashVersion(n, b)
		if err != nil {
			return err
		}
		if v < p.acked[n] {
			return fmt.Errorf("%s: version %d, but version %d was acknowledged", n, v, p.acked[n])
		}
	}
	page, err := s.List(ctx, blob.ListOptions{})
	if err != nil {
		return fmt.Errorf("List: %w", err)
	}
	for _, it := range page.Items {
		if _, _, err := s.Get(ctx, it.Name, blob.GetOptions{}); err != nil {
			return fmt.Errorf("listed %s: %w", it.Name, err)
		}
	}
	return nil
}

func crashNames(writers, rounds int) []string {
	var names []string
	for w := range writers {
		names = append(names, fmt.Sprintf("shared/m%d", w))
		for r := 1; r <= rounds; r++ {
			names = append(names, fmt.Sprintf("w%d/g/%d", w, r))
		}
	}
	return names
}

// crashViolations runs the workload and checks a crash at every step; it
// returns the first violation found, how many steps were checked, and the
// largest group of puts made durable together.
func crashViolations(t *testing.T, opts ...Option) (first error, steps, maxGroup int) {
	const writers, rounds = 6, 3
	points, maxGroup := crashWorkload(t, writers, rounds, opts...)
	names := crashNames(writers, rounds)
	for _, p := range points {
		if err := checkCrash(p, names); err != nil {
			return fmt.Errorf("crash after step %d (%s): %w", p.step, p.op, err), len(points) / 2, maxGroup
		}
	}
	return nil, len(points) / 2, maxGroup
}

// TestCrashAtEveryStep crashes, on a strict in-memory file system that
// keeps only what was synced, after every file-system operation of a
// concurrent workload: every blob is absent or whole, and nothing
// acknowledged is lost.
func TestCrashAtEveryStep(t *testing.T) {
	for name, b := range barriers {
		t.Run(name, func(t *testing.T) {
			err, steps, maxGroup := crashViolations(t, WithBarrier(b))
			if err != nil {
				t.Fatal(err)
			}
			// Each step clones the file system, so puts queue behind
			// every pass.
			if maxGroup < 2 {
				t.Fatalf("no group of more than one put formed: the test did not crash mid-group")
			}
			t.Logf("checked a crash after each of %d steps; the largest group held %d puts", steps, maxGroup)
		})
	}
}

var barriers = map[string]Barrier{"auto": BarrierAuto, "fsync": BarrierFsync, "syncfs": BarrierSyncfs}
