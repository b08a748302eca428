package follow

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/shard"
)

// ErrClosed is returned by Scan after Close.
var ErrClosed = errors.New("follow: reader set closed")

// Options configure a Set.
type Options struct {
	// Notifier wakes a shard's reader when a writer of this process
	// commits to it. Nil means polling only.
	Notifier *shard.Notifier
	// PollMin and PollMax bound a reader's polling interval: it backs off
	// while the shard is idle. Defaults 50 ms and 2 s, as a following
	// Scan's.
	PollMin, PollMax time.Duration
	// ReadBytes bounds one ranged GET of record bytes. Default 4 MiB.
	ReadBytes int64
	// BufferBytes and BufferRuns bound what a follower's buffer holds
	// (record bytes, and runs of records) before it is dropped to catch
	// up on its own. A run larger than BufferBytes is taken into an empty
	// buffer. The records are shared, so a buffer costs its follower
	// only the references. Defaults 4 MiB and 64.
	BufferBytes int
	BufferRuns  int
	// IdleAfter, when positive, parks a reader that has read nothing new
	// for that long: it stops polling the store and waits for the Notifier
	// (a commit of this process) or Wake (someone else saw the shard
	// change), then reads and polls again. A parked reader costs the store
	// nothing. Zero never parks: a following Scan has nobody to wake it
	// for another instance's commits, so its reader keeps polling.
	IdleAfter time.Duration
	// ParkAtStart, with IdleAfter, parks a new reader after its first read
	// that finds nothing, rather than after IdleAfter of polling: for
	// readers whose followers have just read up to the tail themselves
	// and that something else wakes (a subscription's watcher), so that
	// starting on many idle shards does not poll each for IdleAfter.
	ParkAtStart bool
	Logger      *zap.Logger
}

func (o Options) withDefaults() Options {
	o.PollMin, o.PollMax = shard.PollBounds(o.PollMin, o.PollMax)
	if o.ReadBytes <= 0 {
		o.ReadBytes = 4 << 20
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = 4 << 20
	}
	if o.BufferRuns <= 0 {
		o.BufferRuns = 64
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Set owns the tail readers of a process: at most one per shard.
type Set struct {
	r    *shard.Reader
	opts Options
	ctx  context.Context // the readers' parent; cancelled by Close
	stop context.CancelFunc
	wg   sync.WaitGroup // the readers' goroutines

	mu sync.Mutex
	// readers are the running readers by shard.
	readers map[string]*tail
	closed  bool
}

// NewSet returns a Set reading through r.
func NewSet(r *shard.Reader, opts Options) *Set {
	ctx, stop := context.WithCancel(context.Background())
	return &Set{r: r, opts: opts.withDefaults(), ctx: ctx, stop: stop, readers: map[string]*tail{}}
}

// Close stops every reader and waits for them. A Scan still running gets
// ErrClosed when it next needs a reader; a server closes the Set after its
// streams have ended.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	clear(s.readers)
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

// Readers is how many shard readers run.
func (s *Set) Readers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.readers)
}

// Wake makes the shard's reader, if one runs, read now: parked, or
// between polls. A subscription's watcher calls it when a listing shows
// the shard changed. It never blocks, and a wake that comes while the
// reader reads is kept for after the read, so none is lost.
func (s *Set) Wake(shardName string) {
	s.mu.Lock()
	t := s.readers[shardName]
	s.mu.Unlock()
	if t != nil {
		signal(t.wake)
	}
}

// Parked is how many of the running readers are parked (see
// Options.IdleAfter).
func (s *Set) Parked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.readers {
		if t.parked.Load() {
			n++
		}
	}
	return n
}

// LastSeq is the last seq the shard's running reader has read (or the
// follower that started it had), and whether a reader runs: what this
// process knows of the shard's tail without a read.
func (s *Set) LastSeq(shardName string) (uint64, bool) {
	s.mu.Lock()
	t := s.readers[shardName]
	s.mu.Unlock()
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.at, true
}

// join registers a follower at `at` with shard's reader. Without a running
// reader it returns nil, unless start, when it starts one at `at`.
func (s *Set) join(shardName string, at shard.Position, start bool) (*sub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	t := s.readers[shardName]
	if t == nil {
		if !start {
			return nil, nil
		}
		t = s.startLocked(shardName, at)
	}
	return t.add(), nil
}

// startLocked starts shard's reader at `at`. s.mu is held.
func (s *Set) startLocked(shardName string, at shard.Position) *tail {
	ctx, cancel := context.WithCancel(s.ctx)
	t := &tail{set: s, shard: shardName, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1), at: at.Seq(), subs: map[*sub]struct{}{}}
	s.readers[shardName] = t
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(t.done)
		// Whatever ended the reader (Close, above all), no follower is
		// left waiting on it.
		defer t.dropAll()
		t.run(ctx, at)
	}()
	return t
}

// retire removes t from the set if no follower is left on it, and stops
// it; it reports whether it did. The caller waits for t.done when it may.
func (s *Set) retire(t *tail) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.subs) > 0 || t.retired {
		return false
	}
	t.retired = true
	if s.readers[t.shard] == t {
		delete(s.readers, t.shard)
	}
	t.cancel()
	return true
}
