package follow

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/shard"
)

// errNoFollowers stops a read that nobody waits for any more.
var errNoFollowers = errors.New("follow: no followers left")

// afterRead, when set (by tests only), is called after each read of run.
var afterRead func(err error)

// tail is one shard's reader: one goroutine (run) reads the shard's new
// records and hands them to its followers' buffers.
type tail struct {
	set    *Set
	shard  string
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
	wake   chan struct{} // Set.Wake (capacity 1): read now
	parked atomic.Bool   // run waits for a commit or a wake, not a timer

	mu sync.Mutex
	// at is the seq of the last record handed out: a follower that joins
	// gets everything after it through its buffer.
	at      uint64
	subs    map[*sub]struct{}
	retired bool // out of the set; run is stopping
}

// sub is one follower's registration with a tail.
type sub struct {
	t *tail
	// from is the tail's seq when the follower joined: records after it
	// arrive through the buffer, the follower reads those up to it itself.
	from  uint64
	ready chan struct{} // signalled (capacity 1) when buf or dropped changes

	// Guarded by t.mu.
	buf     []shard.Records
	bytes   int
	dropped bool // out of the tail: its buffer overflowed, or the tail failed
}

// add registers a new follower.
func (t *tail) add() *sub {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &sub{t: t, from: t.at, ready: make(chan struct{}, 1)}
	t.subs[s] = struct{}{}
	return s
}

// take empties s's buffer. dropped says s is out of the tail: the records
// returned are still in order and complete up to where it was dropped.
func (s *sub) take() (recs []shard.Records, dropped bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	recs, s.buf, s.bytes = s.buf, nil, 0
	return recs, s.dropped
}

// leave unregisters s. If it was the tail's last follower, the tail stops
// and leave waits for its goroutine.
func (s *sub) leave() {
	t := s.t
	t.mu.Lock()
	delete(t.subs, s)
	s.buf, s.dropped = nil, true
	t.mu.Unlock()
	if t.set.retire(t) {
		<-t.done
	}
}

// dropLocked takes s out of the tail. t.mu is held.
func (t *tail) dropLocked(s *sub) {
	delete(t.subs, s)
	s.dropped = true
	signal(s.ready)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// publish hands recs to every follower's buffer, dropping a follower whose
// buffer is full. It fails with errNoFollowers when none is left, so
// that the read stops there.
func (t *tail) publish(recs shard.Records) error {
	o := &t.set.opts
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.subs) == 0 {
		return errNoFollowers
	}
	t.at = recs.Last()
	for s := range t.subs {
		if len(s.buf) > 0 && (len(s.buf) >= o.BufferRuns || s.bytes+recs.Bytes() > o.BufferBytes) {
			t.dropLocked(s)
			continue
		}
		s.buf = append(s.buf, recs)
		s.bytes += recs.Bytes()
		signal(s.ready)
	}
	return nil
}

// run reads the shard from `at` until ctx ends, no follower is left, or a
// read fails. It polls, backing off while the shard is idle; with
// IdleAfter, a shard idle that long parks it until a commit of this
// process or a Wake.
func (t *tail) run(ctx context.Context, at shard.Position) {
	o := &t.set.opts
	var wait func() <-chan struct{}
	if o.Notifier != nil {
		var cancel func()
		wait, cancel = o.Notifier.Subscribe(t.shard)
		defer cancel()
	}
	// Timers are synchronous (Go 1.23): Stop and Reset leave no stale tick.
	timer := time.NewTimer(o.PollMax)
	defer timer.Stop()
	poll := o.PollMin
	news := t.startNews() // when a read last found records
	for {
		var woken <-chan struct{}
		if wait != nil {
			woken = wait() // taken before the read, so no commit is missed
		}
		start := at.Seq()
		err := t.set.r.ReadNew(ctx, t.shard, &at, o.ReadBytes, t.publish)
		if afterRead != nil {
			afterRead(err)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !errors.Is(err, errNoFollowers):
			t.fail(err)
			return
		}
		if t.set.retire(t) {
			return // the last follower was dropped, or left
		}
		if err != nil {
			// The read found no follower, yet one has joined since (the
			// first follower joins just after its reader starts). What the
			// read found went to nobody and its commit's notification may
			// be spent: waiting would leave the follower behind until the
			// next commit or poll.
			continue
		}
		if at.Seq() != start {
			poll, news = o.PollMin, time.Now()
		}
		if o.IdleAfter > 0 && time.Since(news) >= o.IdleAfter {
			// Parked: only a commit or a wake makes the next read. One
			// that finds nothing (a checkpoint changed the listing) parks
			// again at once.
			if !t.park(ctx, woken) {
				return
			}
			poll = o.PollMin
			continue
		}
		wait := poll
		if o.IdleAfter > 0 {
			// Park on time, whatever the polling interval: one last read
			// when IdleAfter is up, then no more.
			wait = max(min(wait, o.IdleAfter-time.Since(news)), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-woken:
			timer.Stop()
		case <-t.wake:
			timer.Stop()
		case <-timer.C:
			poll = min(2*poll, o.PollMax)
		}
	}
}

// startNews is when the reader counts the shard as last found with new
// records at its start: now, or with ParkAtStart the shard's last commit.
// The follower that starts the reader has just read up to the tail: a
// shard idle for IdleAfter parks after one read, and one committed to
// since polls until it is idle that long, as if this reader had seen the
// commit. Otherwise the next commit of a shard another instance writes,
// active as it may be, would wait for a wake (a subscription's listing,
// seconds away).
func (t *tail) startNews() time.Time {
	now := time.Now()
	if !t.set.opts.ParkAtStart {
		return now
	}
	last, ok := t.set.r.LastCommitRead(t.shard)
	switch {
	case !ok:
		return time.Time{}
	case last.After(now):
		return now // the writer's clock runs ahead of ours
	}
	return last
}

// park waits, parked, for a commit of this process (woken), a Wake, or
// ctx's end; it reports false when ctx ended.
func (t *tail) park(ctx context.Context, woken <-chan struct{}) bool {
	t.parked.Store(true)
	defer t.parked.Store(false)
	select {
	case <-ctx.Done():
	case <-woken:
	case <-t.wake:
	}
	return ctx.Err() == nil
}

// fail takes t out of the set and drops every follower: each reads on its
// own from its cursor, which gives it the error or carries it on.
func (t *tail) fail(err error) {
	t.set.opts.Logger.Debug("shard reader stopped; its followers read on their own", zap.String("shard", t.shard), zap.Error(err))
	s := t.set
	s.mu.Lock()
	defer s.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retired = true
	if s.readers[t.shard] == t {
		delete(s.readers, t.shard)
	}
	for f := range t.subs {
		t.dropLocked(f)
	}
	t.cancel()
}

// dropAll drops every follower left when the reader has stopped.
func (t *tail) dropAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.retired = true
	for f := range t.subs {
		t.dropLocked(f)
	}
}

// isDropped reports whether s is out of its tail.
func (s *sub) isDropped() bool {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.dropped
}
