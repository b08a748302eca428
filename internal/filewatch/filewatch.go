// Package filewatch reloads configuration that lives in files (TLS
// certificates, an authorization policy) when the files change, without a
// restart and without ever dropping the configuration in force for a bad
// one.
//
// It polls: every interval it reads the files and compares a hash of their
// contents with the last one it saw. Polling works the same on every volume
// type, including Kubernetes Secret and ConfigMap volumes, whose files
// change by an atomic swap of a symlink that inotify-style watchers miss
// unless they watch the directory. The files are small, so reading them
// every few seconds costs nothing.
package filewatch

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
)

// LoadFunc parses and applies the contents of the watched files, in the
// order they were given. It returns an error, and applies nothing, when the
// contents are not valid: the configuration in force stays.
type LoadFunc func(contents [][]byte) error

// Watcher calls a LoadFunc with the contents of its files once at New and
// again each time they change.
type Watcher struct {
	files []string
	load  LoadFunc
	log   *zap.Logger

	mu      sync.Mutex // serializes Check
	seen    [32]byte   // hash of the contents last given to load, valid or not
	applied [32]byte   // hash of the contents last applied
	failed  uint64     // loads that returned an error
	loads   uint64     // loads that succeeded
	readErr string     // the last read error logged, until a read succeeds

	subMu sync.Mutex                 // guards subs
	subs  map[*subscription]struct{} // called after each applied change

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// ErrNoFiles is returned by New without files.
var ErrNoFiles = errors.New("filewatch: no files to watch")

// New reads files and calls load with their contents. If that fails, New
// fails: a process must not start on a configuration it cannot apply. When
// interval is positive, a goroutine checks the files every interval until
// Close; otherwise only Check does. log may be nil.
func New(files []string, interval time.Duration, load LoadFunc, log *zap.Logger) (*Watcher, error) {
	if len(files) == 0 {
		return nil, ErrNoFiles
	}
	if log == nil {
		log = zap.NewNop()
	}
	w := &Watcher{files: files, load: load, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	contents, sum, err := w.read()
	if err != nil {
		return nil, err
	}
	if err := load(contents); err != nil {
		return nil, err
	}
	w.seen, w.applied, w.loads = sum, sum, 1
	if interval > 0 {
		go w.run(interval)
	} else {
		close(w.done)
	}
	return w, nil
}

func (w *Watcher) run(interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			_, _ = w.Check()
		}
	}
}

// Check reads the files now and, if their contents changed since the last
// check, calls load. It reports whether new contents were applied. A read
// error or a failing load is logged and returned, and the configuration in
// force stays; the same bad contents are not logged again until they
// change.
func (w *Watcher) Check() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	contents, sum, err := w.read()
	if err != nil {
		// A file mid-replacement can be briefly missing: log each distinct
		// read error once, at Warn, and keep what is in force.
		if err.Error() != w.readErr {
			w.readErr = err.Error()
			w.log.Warn("config reload: cannot read; keeping the configuration in force", zap.Strings("files", w.files), zap.Error(err))
		}
		return false, err
	}
	w.readErr = ""
	if sum == w.seen {
		return false, nil
	}
	w.seen = sum
	if err := w.load(contents); err != nil {
		w.failed++
		w.log.Error("config reload: rejected the changed files; keeping the configuration in force",
			zap.Strings("files", w.files), zap.Error(err))
		return false, err
	}
	w.applied = sum
	w.loads++
	w.log.Info("config reload: applied the changed files", zap.Strings("files", w.files))
	w.notify()
	return true, nil
}

// subscription is one OnApply registration. It is a pointer so that two
// registrations of the same function stay apart.
type subscription struct{ f func() }

// OnApply registers f to be called after each change that load applied
// (not after the load at New, nor after a rejected change), and returns a
// function that unregisters it. f runs on the goroutine that checked (the
// polling goroutine, or a caller of Check), after the new configuration is
// in force and with the next check held back until it returns: a
// subscriber sees the changes in order and one at a time. f must be quick
// and must not call Check.
func (w *Watcher) OnApply(f func()) (unregister func()) {
	sub := &subscription{f: f}
	w.subMu.Lock()
	if w.subs == nil {
		w.subs = map[*subscription]struct{}{}
	}
	w.subs[sub] = struct{}{}
	w.subMu.Unlock()
	return func() {
		w.subMu.Lock()
		delete(w.subs, sub)
		w.subMu.Unlock()
	}
}

// notify calls the subscribers. w.mu is held.
func (w *Watcher) notify() {
	w.subMu.Lock()
	subs := make([]*subscription, 0, len(w.subs))
	for sub := range w.subs {
		subs = append(subs, sub)
	}
	w.subMu.Unlock()
	for _, sub := range subs {
		sub.f()
	}
}

// Stats reports how many loads succeeded (the one at New included) and how
// many were rejected.
func (w *Watcher) Stats() (loads, failures uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.loads, w.failed
}

// Close stops the polling goroutine and waits for it. It is idempotent.
func (w *Watcher) Close() {
	w.once.Do(func() {
		select {
		case <-w.done: // no goroutine
		default:
			close(w.stop)
		}
	})
	<-w.done
}

// read returns the files' contents and a hash over all of them (each
// length-prefixed, so that moving bytes between files changes it).
func (w *Watcher) read() ([][]byte, [32]byte, error) {
	h := sha256.New()
	out := make([][]byte, len(w.files))
	for i, f := range w.files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, [32]byte{}, err
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
		out[i] = b
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return out, sum, nil
}
