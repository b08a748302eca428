package localstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// Group durability.
//
// Every put's fsyncs used to be its own: on a shared disk, N writers each
// committing alone paid N file fsyncs, N renames and N directory fsyncs,
// one after the other. Now one goroutine, the syncer, makes puts durable in
// groups: each pass takes every put queued (puts that arrive while a pass
// runs wait for the next; there is no linger timer, so a lone put starts at
// once), and
//
//  1. makes their temporary files durable (barrier 1: data before names);
//  2. publishes them in queue order, checking each condition at that moment
//     under the name's lock, so two compare-and-swaps on one name in one
//     group cannot both pass;
//  3. makes every directory it touched durable, each once, with the
//     parents of directories it created (barrier 2: names before answers);
//  4. answers every caller.
//
// From the start of a pass until its outcome is known, its names are
// pending (inflight): a read that finds a version the pass published waits
// for the outcome, so nothing published but not yet durable is reported as
// stored. A failed directory sync after publishing fails the store (see
// fail), and every put of the group is answered as in doubt.

// putReq is one put queued for the syncer.
type putReq struct {
	name, path string
	file       vfs.File // the temporary file, written, open
	tmpName    string   // its name, unless it is anon
	anon       vfs.AnonFile
	attrs      blob.Attrs
	opts       blob.PutOptions

	// Set by the syncer before done is closed.
	res  blob.Attrs
	err  error
	done chan struct{}

	taken bool // the syncer took it: guarded by syncer.mu
}

// group is the pass in flight: its names and the versions it may publish.
type group struct {
	versions map[string][]blob.ETag
	done     chan struct{} // closed once the outcome is known
}

func (g *group) holds(name string, etag blob.ETag) bool {
	return slices.Contains(g.versions[name], etag)
}

// Barrier says how the syncer makes a group durable.
//
// Measured here (docs/performance.md): fsyncs of a group's N files, issued
// in parallel, share journal commits but each still flushes the disk's
// cache, so on a quiet machine a barrier over 30 files took 2-4 times as
// long as one syncfs(2). But syncfs writes back everything dirty on the
// file system, other programs' files included: beside a program writing
// continuously, a lone put's p50 rose from 1.3 ms to 40 ms, and with other
// work writing on the machine syncfs groups were from 0.45 to 1.3 times as
// fast as fsyncs. rolloutd's data directory shares its file system with
// whatever else the box writes (an RL job's checkpoints), so the default
// is BarrierFsync, whose cost does not depend on other programs' writes.
// BarrierAuto suits a file system of rolloutd's own (rolloutd's
// --local-barrier).
type Barrier int

const (
	// BarrierFsync, the default, fsyncs each file, then each directory,
	// in parallel.
	BarrierFsync Barrier = iota
	// BarrierAuto: fsync below syncfsMin files (or directories), syncfs
	// from there, where the kernel reports syncfs errors (Linux 5.8+).
	BarrierAuto
	// BarrierSyncfs calls syncfs(2) on the store's file system for each
	// barrier (falling back to fsync where the kernel would not report its
	// errors).
	BarrierSyncfs
)

// barrierNames are the names String and Set use, by Barrier.
var barrierNames = [...]string{BarrierFsync: "fsync", BarrierAuto: "auto", BarrierSyncfs: "syncfs"}

// String returns the barrier's name, as Set takes it.
func (b Barrier) String() string {
	if int(b) < len(barrierNames) {
		return barrierNames[b]
	}
	return fmt.Sprintf("Barrier(%d)", int(b))
}

// Set parses a barrier's name (fsync, auto or syncfs), so that a Barrier
// is a flag.Value.
func (b *Barrier) Set(name string) error {
	if i := slices.Index(barrierNames[:], name); i >= 0 {
		*b = Barrier(i)
		return nil
	}
	return fmt.Errorf("unknown barrier %q: want %s", name, strings.Join(barrierNames[:], ", "))
}

// syncfsMin is the size from which BarrierAuto uses syncfs for a barrier.
const syncfsMin = 4

// useSyncfs reports whether a barrier over n files or directories uses
// syncfs.
func (s *Store) useSyncfs(n int) bool {
	switch {
	case !s.syncfsOK:
		return false
	case s.barrier == BarrierSyncfs:
		return true
	case s.barrier == BarrierAuto:
		return n >= syncfsMin
	}
	return false
}

// maxParallelSyncs bounds the fsyncs a pass has in flight at once.
const maxParallelSyncs = 32

// syncer owns the goroutine that makes puts durable in groups.
type syncer struct {
	s *Store

	mu    sync.Mutex
	queue []*putReq

	wake    chan struct{} // 1-buffered: the queue is not empty
	stop    chan struct{} // closed by Close
	stopped chan struct{} // closed when run returns

	inflight atomic.Pointer[group]
}

func newSyncer(s *Store) *syncer {
	return &syncer{s: s, wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
}

func (sy *syncer) start() { go sy.run() }

// close stops the syncer and waits for it. Close calls it once no
// operation is in flight, but a put whose caller gave up may still be.
func (sy *syncer) close() {
	close(sy.stop)
	<-sy.stopped
}

func (sy *syncer) enqueue(r *putReq) {
	sy.mu.Lock()
	sy.queue = append(sy.queue, r)
	sy.mu.Unlock()
	select {
	case sy.wake <- struct{}{}:
	default:
	}
}

// withdraw removes r from the queue unless the syncer took it; it reports
// whether it did.
func (sy *syncer) withdraw(r *putReq) bool {
	sy.mu.Lock()
	defer sy.mu.Unlock()
	if r.taken {
		return false
	}
	if i := slices.Index(sy.queue, r); i >= 0 {
		sy.queue = slices.Delete(sy.queue, i, i+1)
	}
	return true
}

func (sy *syncer) take() []*putReq {
	sy.mu.Lock()
	defer sy.mu.Unlock()
	q := sy.queue
	sy.queue = nil
	for _, r := range q {
		r.taken = true
	}
	return q
}

func (sy *syncer) run() {
	defer close(sy.stopped)
	for {
		select {
		case <-sy.wake:
		case <-sy.stop:
			// Close waits for every operation first, so only puts whose
			// callers gave up after the syncer took them can be left, and
			// those are finished already. Finish anything else too.
			for q := sy.take(); len(q) > 0; q = sy.take() {
				sy.pass(q)
			}
			return
		}
		for q := sy.take(); len(q) > 0; q = sy.take() {
			sy.pass(q)
		}
	}
}

// awaitDurable waits, if the version etag of name was published by the
// pass in flight, until that pass's outcome is known. A version a read
// found that no pass in flight holds is durable (or the store failed,
// which the read checks after).
func (sy *syncer) awaitDurable(done <-chan struct{}, name string, etag blob.ETag) bool {
	g := sy.inflight.Load()
	if g == nil || !g.holds(name, etag) {
		return true
	}
	select {
	case <-g.done:
		return true
	case <-done:
		return false
	}
}

// pending reports whether the version etag of name was published by the
// pass in flight (or may be).
func (sy *syncer) pending(name string, etag blob.ETag) bool {
	g := sy.inflight.Load()
	return g != nil && g.holds(name, etag)
}

// touches reports whether the pass in flight may publish a version of name.
func (sy *syncer) touches(name string) bool {
	g := sy.inflight.Load()
	return g != nil && len(g.versions[name]) > 0
}

// pass makes one group durable and answers it.
func (sy *syncer) pass(reqs []*putReq) {
	s := sy.s
	start := time.Now()
	g := &group{versions: make(map[string][]blob.ETag, len(reqs)), done: make(chan struct{})}
	for _, r := range reqs {
		g.versions[r.name] = append(g.versions[r.name], r.attrs.ETag)
	}
	sy.inflight.Store(g)
	defer func() {
		sy.inflight.Store(nil)
		close(g.done)
		for _, r := range reqs {
			close(r.done)
		}
		if s.observe != nil {
			s.observe(len(reqs), time.Since(start))
		}
	}()

	if err := s.Failed(); err != nil {
		for _, r := range reqs {
			s.discard(r)
			r.err = fmt.Errorf("localstore: put %q refused: %w", r.name, err)
		}
		return
	}

	live := sy.durableFiles(reqs)

	// Publish, in queue order, each condition checked now.
	var dirs []string
	var published []*putReq
	for _, r := range live {
		if r.err != nil {
			s.dropTemp(r)
			continue
		}
		if s.publishOne(r) {
			published = append(published, r)
			if d := filepath.Dir(r.path); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}

	// Barrier 2: every directory touched, and the parents of those
	// created, are durable before anyone is answered.
	if len(published) > 0 && !s.skipDirBarrier {
		if err := s.syncDirs(dirs); err != nil {
			failure := s.fail("put", published[0].name, err)
			for _, r := range reqs {
				r.res, r.err = blob.Attrs{}, inDoubt("put", r.name, failure)
			}
			return
		}
	}
	if ferr := s.Failed(); ferr != nil && len(published) > 0 {
		// Another call failed the store meanwhile.
		for _, r := range reqs {
			r.res, r.err = blob.Attrs{}, inDoubt("put", r.name, ferr)
		}
	}
}

// durableFiles is barrier 1: every temporary file's data is durable before
// any name points at it. A failure leaves nothing visible: the put fails
// and the store carries on. It closes the files and returns the puts still
// to publish (those with an error among them drop out when published).
func (sy *syncer) durableFiles(reqs []*putReq) []*putReq {
	s := sy.s
	live := reqs
	if !s.skipFileBarrier {
		errs := s.syncFiles(reqs)
		live = live[:0:0]
		for i, r := range reqs {
			if errs[i] != nil {
				s.discard(r)
				r.err = notStored(r.name, errs[i])
				continue
			}
			live = append(live, r)
		}
	}
	for _, r := range live {
		if err := r.file.Close(); err != nil && r.err == nil {
			r.err = notStored(r.name, err) // ext4 may report a write-back failure here
		}
		r.file = nil
	}
	return live
}

// syncFiles makes the temporary files of reqs durable and returns each
// one's error.
func (s *Store) syncFiles(reqs []*putReq) []error {
	errs := make([]error, len(reqs))
	if s.useSyncfs(len(reqs)) {
		if err := s.fs.SyncFS(s.tmpDir); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
		return errs
	}
	parallel(len(reqs), func(i int) {
		// Safe to fail without failing the store: nothing is visible yet,
		// and the file is removed.
		errs[i] = s.syncFile(reqs[i].file)
	})
	return errs
}

// syncDirs makes the entries just published in dirs durable, with those of
// the directories created on the way, each directory once.
func (s *Store) syncDirs(dirs []string) error {
	toSync, ancestors := s.dirsToSync(dirs)
	if s.useSyncfs(len(toSync)) {
		if err := s.fs.SyncFS(s.blobsDir); err != nil {
			return fmt.Errorf("syncfs after publishing in %s: %w", dirs[0], err)
		}
	} else {
		errs := make([]error, len(toSync))
		parallel(len(toSync), func(i int) { errs[i] = s.syncDir(toSync[i]) })
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	for _, d := range ancestors {
		s.durable.Store(d, struct{}{})
	}
	return nil
}

// parallel runs f(0..n-1), at most maxParallelSyncs at once, and waits:
// fsyncs issued together share the file system's journal commits. One
// runs inline.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, maxParallelSyncs) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
