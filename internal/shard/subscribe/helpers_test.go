package subscribe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// opCounter counts the reads and listings sent through it, reads by the
// shard their blob belongs to: the store ops the engine causes, apart from
// the writers', which use the store beneath.
type opCounter struct {
	blob.Store
	mu      sync.Mutex
	byShard map[string]int
	reads   int
	lists   int
}

func (c *opCounter) read(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	rest := strings.TrimPrefix(name, format.ShardsRoot)
	if i := strings.Index(rest, "/_"); i > 0 {
		c.byShard[rest[:i]]++
	}
}

func (c *opCounter) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	c.read(name)
	return c.Store.Get(ctx, name, opts)
}

func (c *opCounter) Head(ctx context.Context, name string) (blob.Attrs, error) {
	c.read(name)
	return c.Store.Head(ctx, name)
}

func (c *opCounter) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	c.mu.Lock()
	c.lists++
	c.mu.Unlock()
	return c.Store.List(ctx, opts)
}

// counts returns the reads, the listings, and the reads of shards for
// which idle says true.
func (c *opCounter) counts(idle func(string) bool) (reads, lists, idleReads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, n := range c.byShard {
		if idle != nil && idle(s) {
			idleReads += n
		}
	}
	return c.reads, c.lists, idleReads
}

// env is one process: a store, writers (local ones publish to the
// Notifier), and an engine reading through an opCounter.
type env struct {
	t        *testing.T
	store    blob.Store
	ops      *opCounter
	notifier *shard.Notifier
	e        *Engine

	mu      sync.Mutex
	writers map[string]*shard.Writer
	next    int
}

// fast are options for tests: short polls, watches and idling.
var fast = Options{PollMin: time.Millisecond, PollMax: 10 * time.Millisecond, WatchInterval: 20 * time.Millisecond, IdleAfter: 100 * time.Millisecond}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	store := memstore.New()
	v := &env{t: t, store: store, ops: &opCounter{Store: store, byShard: map[string]int{}}, notifier: shard.NewNotifier(), writers: map[string]*shard.Writer{}}
	opts.Notifier = v.notifier
	opts.Logger = zaptest.NewLogger(t)
	v.e = New(v.ops, shard.NewReader(v.ops, shard.ReaderOptions{}), opts)
	t.Cleanup(func() {
		v.e.Close()
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, w := range v.writers {
			w.Abort()
		}
	})
	return v
}

// writer returns the shard's writer, opening it (local: it publishes to
// the Notifier, as a writer of this process; else as another instance's).
func (v *env) writer(name string, local bool) *shard.Writer {
	v.t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if w := v.writers[name]; w != nil {
		return w
	}
	o := shard.Options{RetryBackoff: time.Millisecond}
	if local {
		o.Notifier = v.notifier
	}
	w, err := shard.Open(context.Background(), v.store, name, o)
	if err != nil {
		v.t.Fatal(err)
	}
	v.writers[name] = w
	return w
}

// appendN appends n records to shard in one commit; it returns the last
// seq.
func (v *env) appendN(name string, n int, local bool) uint64 {
	v.t.Helper()
	w := v.writer(name, local)
	es := make([]shard.Entry, n)
	for i := range es {
		v.mu.Lock()
		id := fmt.Sprintf("id-%d", v.next)
		v.next++
		v.mu.Unlock()
		var err error
		if es[i], err = shard.Prepare(&rolloutv1.Record{Id: id, RolloutId: "r", Content: "c"}, time.Unix(1700000000, 0)); err != nil {
			v.t.Fatal(err)
		}
	}
	res, err := w.Append(context.Background(), es)
	if err != nil {
		v.t.Fatal(err)
	}
	return res[len(res)-1].Seq
}

// remove deletes shard, after closing its writer.
func (v *env) remove(name string) {
	v.t.Helper()
	v.mu.Lock()
	w := v.writers[name]
	delete(v.writers, name)
	v.mu.Unlock()
	if w != nil {
		w.Abort()
	}
	if _, err := shard.Delete(context.Background(), v.store, name, shard.DeleteOptions{}); err != nil {
		v.t.Fatal(err)
	}
}

// closeWriters closes every writer: the shards stay as they are.
func (v *env) closeWriters() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for name, w := range v.writers {
		if err := w.Close(context.Background()); err != nil {
			v.t.Fatal(err)
		}
		delete(v.writers, name)
	}
}

// sub is one running subscription and what it received.
type sub struct {
	mu      sync.Mutex
	msgs    []Message
	seqs    map[string][]uint64
	cursors map[string]uint64
	deleted map[string][]uint64 // the cursors of the deletions reported
	started *Message
	moved   chan struct{}
	cancel  context.CancelFunc
	done    chan error
	ended   error
}

func (v *env) subscribe(req Request) *sub {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sub{seqs: map[string][]uint64{}, cursors: map[string]uint64{}, deleted: map[string][]uint64{}, moved: make(chan struct{}, 1), cancel: cancel, done: make(chan error, 1)}
	go func() {
		s.done <- v.e.Subscribe(ctx, req, func(m Message) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.started == nil && !m.Started {
				return errors.New("a message before Started")
			}
			switch {
			case m.Started:
				if s.started != nil {
					return errors.New("two Started messages")
				}
				s.started = &m
			case m.Deleted:
				s.deleted[m.Shard] = append(s.deleted[m.Shard], m.Batch.Cursor)
			default:
				for _, r := range m.Batch.Records {
					s.seqs[m.Shard] = append(s.seqs[m.Shard], r.GetSeq())
				}
				s.cursors[m.Shard] = m.Batch.Cursor
			}
			select {
			case s.moved <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	v.t.Cleanup(func() { s.stop(v.t) })
	return s
}

// waitFor waits until cond holds of what s received.
func (s *sub) waitFor(t *testing.T, what string, cond func(s *sub) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s.mu.Lock()
		ok := cond(s)
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-s.moved:
		case <-time.After(5 * time.Millisecond):
		case err := <-s.done:
			s.done <- err
			t.Fatalf("subscription ended with %v while waiting for %s", err, what)
		case <-deadline:
			t.Fatalf("subscription never got %s", what)
		}
	}
}

// reached waits until shard's cursor reaches seq.
func (s *sub) reached(t *testing.T, name string, seq uint64) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("%s up to %d", name, seq), func(s *sub) bool { return s.cursors[name] >= seq })
}

// stop ends the subscription and checks it ended by its context only.
func (s *sub) stop(t *testing.T) {
	s.cancel()
	if s.done == nil {
		return
	}
	if err := <-s.done; !errors.Is(err, context.Canceled) {
		t.Errorf("subscription ended with %v", err)
	}
	s.done = nil
}

// checkRun fails unless shard's seqs are exactly from+1..to, in order.
func (s *sub) checkRun(t *testing.T, name string, from, to uint64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.seqs[name]
	if uint64(len(got)) != to-from {
		t.Fatalf("shard %s: got seqs %v, want %d..%d", name, got, from+1, to)
	}
	for i, q := range got {
		if q != from+uint64(i)+1 {
			t.Fatalf("shard %s: got seqs %v, want %d..%d", name, got, from+1, to)
		}
	}
}
