package faultstore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Match selects calls for Intercept, OnLanded, Hold and Count. Every field
// set must hold. A Match is counted where it is used: Skip and Count refer
// to the calls that one interceptor, watcher, gate or counter saw.
type Match struct {
	// Ops limits the match to these kinds of call; empty means all.
	Ops []Op
	// Prefix and Suffix limit it to blob names (for List, prefixes) that
	// start and end with them.
	Prefix, Suffix string
	// If, when set, must also hold; it sees the call's arguments. It runs
	// under the Store's lock: it must not call the Store.
	If func(Call) bool
	// Skip lets the first Skip matching calls by.
	Skip int
	// Count, when positive, selects only the Count matching calls after
	// the skipped ones: {Skip: 2, Count: 1} is the third.
	Count int
}

func (m *Match) matches(c Call) bool {
	return (len(m.Ops) == 0 || slices.Contains(m.Ops, c.Op)) &&
		strings.HasPrefix(c.Name, m.Prefix) && strings.HasSuffix(c.Name, m.Suffix) &&
		(m.If == nil || m.If(c))
}

// matcher is one registered Match with its counts and what to run.
type matcher struct {
	Match
	seen      int
	intercept func(context.Context, Call) error
	land      func(Call)
	counter   *Counter
	answer    func(Call) ([]byte, blob.Attrs, error)
}

// take reports whether c is one of the calls m selects, counting it.
// Callers hold s.mu.
func (m *matcher) take(c Call) bool {
	if !m.matches(c) {
		return false
	}
	m.seen++
	return m.seen > m.Skip && (m.Count <= 0 || m.seen <= m.Skip+m.Count)
}

// selected returns the funcs of the matchers in list that select c.
func (s *Store) selected(list *[]*matcher, c Call) []*matcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*matcher
	for _, m := range *list {
		if m.take(c) {
			out = append(out, m)
		}
	}
	return out
}

func (s *Store) register(list *[]*matcher, m *matcher) (remove func()) {
	s.mu.Lock()
	*list = append(*list, m)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		*list = slices.DeleteFunc(*list, func(x *matcher) bool { return x == m })
	}
}

// intercept counts c, then runs the interceptors that select it, in
// order, until one returns an error.
func (s *Store) intercept(ctx context.Context, c Call) error {
	for _, m := range s.selected(&s.counts, c) {
		m.counter.n.Add(1)
	}
	for _, m := range s.selected(&s.intercepts, c) {
		if err := m.intercept(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// land runs the watchers that select c, a call the inner store answered.
func (s *Store) land(c Call) {
	for _, m := range s.selected(&s.landed, c) {
		m.land(c)
	}
}

// Intercept runs f on each call m selects, on the caller's goroutine,
// before the rules and before the call reaches the inner store. f may block
// (it must return when ctx ends) or act on the inner store; an error from f
// fails the call without calling the inner store, wrapped, so errors.Is
// still finds it. A panic in f reaches the caller, as a panicking backend's
// would. Interceptors run in the order they were added; the returned
// function removes this one.
func (s *Store) Intercept(m Match, f func(ctx context.Context, c Call) error) (remove func()) {
	return s.register(&s.intercepts, &matcher{Match: m, intercept: f})
}

// Fail fails the calls m selects with err (wrapped), without calling the
// inner store.
func (s *Store) Fail(m Match, err error) (remove func()) {
	return s.Intercept(m, func(context.Context, Call) error { return err })
}

// OnLanded runs f on each call m selects once the inner store answered it
// (c.Err is its error), on the caller's goroutine, before the caller gets
// the result: the place to let a competing writer in after a write landed.
// It does not run for calls a fault or an interceptor kept from the inner
// store.
func (s *Store) OnLanded(m Match, f func(c Call)) (remove func()) {
	return s.register(&s.landed, &matcher{Match: m, land: f})
}

// AnswerGet answers the Gets m selects with what f returns, in place of
// the inner store: after the interceptors and the rules, and before
// OnLanded, which sees f's error as the store's. It serves what a store
// could have said but this one cannot be made to hold, such as a stale
// manifest read after a newer one was written. Only the first AnswerGet
// that selects a Get answers it.
func (s *Store) AnswerGet(m Match, f func(c Call) ([]byte, blob.Attrs, error)) (remove func()) {
	return s.register(&s.answers, &matcher{Match: m, answer: f})
}

// answerer returns the f of the first AnswerGet that selects c, or nil to
// ask the inner store.
func (s *Store) answerer(c Call) func(Call) ([]byte, blob.Attrs, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.answers {
		if m.take(c) {
			return m.answer
		}
	}
	return nil
}

// listed is what a List page holds, for Call.Listed.
func listed(items []blob.Attrs, prefixes []string) []string {
	out := make([]string, 0, len(items)+len(prefixes))
	for _, it := range items {
		out = append(out, it.Name)
	}
	return append(out, prefixes...)
}

// Counter counts the calls a Match selected.
type Counter struct{ n atomic.Int64 }

// N returns how many calls were counted.
func (c *Counter) N() int64 { return c.n.Load() }

// Count counts the calls m selects as they arrive (before any fault), for
// as long as the Store lives, whatever interceptors and rules then do to
// them.
func (s *Store) Count(m Match) *Counter {
	c := &Counter{}
	s.register(&s.counts, &matcher{Match: m, counter: c})
	return c
}

// Gate holds calls on their way to the inner store until it is released
// (they go on) or failed (they fail, not applied). A held call whose
// context ends returns the context's error, wrapped, and is not applied.
// Every held call is reported once by Wait.
type Gate struct {
	remove func()
	deaf   bool // see Deaf
	inner  blob.Store
	late   bool   // see LandsLate
	landed []Call // calls that gave up and land on Release (LandsLate)

	mu      sync.Mutex
	done    chan struct{} // closed by Release or Fail
	err     error         // set by Fail
	held    []Call        // every call held so far, in order
	waited  int           // how many of held Wait returned
	holding int           // calls waiting at the gate now
	notify  chan struct{} // closed and replaced when a call is held
	reached chan struct{} // closed when the first call is held
}

// Hold returns a Gate that holds the calls m selects, from now until it is
// released or failed: Match{Ops: []Op{OpPut}, Suffix: "/_manifest", Skip: 1,
// Count: 1} holds the second manifest put only.
func (s *Store) Hold(m Match, opts ...HoldOption) *Gate {
	g := &Gate{done: make(chan struct{}), notify: make(chan struct{}), reached: make(chan struct{})}
	for _, o := range opts {
		o(g)
	}
	g.inner = s.inner
	g.remove = s.Intercept(m, g.wait)
	return g
}

// HoldOption configures Hold.
type HoldOption func(*Gate)

// Deaf makes held calls deaf to their context, as a request on a hung
// connection without a deadline is: only Release or Fail ends them. The
// test must end them (t.Cleanup(g.Release)), or they leak.
func Deaf(g *Gate) { g.deaf = true }

// LandsLate makes a held Put or Delete whose context ends answer
// blob.ErrOutcomeUnknown (wrapped) at once, as a request already on the
// wire does when its sender gives up, and land anyway: Release applies it
// to the inner store before it returns; Fail drops it.
func LandsLate(g *Gate) { g.late = true }

func (g *Gate) wait(ctx context.Context, c Call) error {
	g.mu.Lock()
	select {
	case <-g.done: // released before the call got here
		err := g.err
		g.mu.Unlock()
		return err
	default:
	}
	if len(g.held) == 0 {
		close(g.reached)
	}
	g.held = append(g.held, c)
	g.holding++
	close(g.notify)
	g.notify = make(chan struct{})
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.holding--
		g.mu.Unlock()
	}()
	ended := ctx.Done()
	if g.deaf {
		ended = nil
	}
	select {
	case <-g.done:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.err
	case <-ended:
		if g.late && (c.Op == OpPut || c.Op == OpDelete) {
			g.mu.Lock()
			defer g.mu.Unlock()
			c.Data = bytes.Clone(c.Data)
			g.landed = append(g.landed, c)
			return fmt.Errorf("held at a gate, lands when released (%w): %w", ctx.Err(), blob.ErrOutcomeUnknown)
		}
		return fmt.Errorf("held at a gate: %w", ctx.Err())
	}
}

// Reached is closed once a call is held.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Wait returns the next held call that Wait has not returned yet, waiting
// for one if need be, or ctx's error.
func (g *Gate) Wait(ctx context.Context) (Call, error) {
	for {
		g.mu.Lock()
		if g.waited < len(g.held) {
			c := g.held[g.waited]
			g.waited++
			g.mu.Unlock()
			return c, nil
		}
		notify := g.notify
		g.mu.Unlock()
		select {
		case <-notify:
		case <-ctx.Done():
			return Call{}, fmt.Errorf("faultstore: waiting for a held call: %w", ctx.Err())
		}
	}
}

// Holding returns how many calls are held now.
func (g *Gate) Holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding
}

// Held returns how many calls were held in all.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

// Release lets the held calls go on to the inner store, and retires the
// gate: later calls pass. Release and Fail are idempotent; the first wins.
func (g *Gate) Release() { g.end(nil) }

// Fail ends the held calls with err (wrapped), not applied, and retires the
// gate. A nil err means blob.ErrUnavailable, as for a Fail rule.
func (g *Gate) Fail(err error) {
	if err == nil {
		err = blob.ErrUnavailable
	}
	g.end(err)
}

func (g *Gate) end(err error) {
	g.remove()
	g.mu.Lock()
	select {
	case <-g.done:
		g.mu.Unlock()
		return
	default:
	}
	g.err = err
	close(g.done)
	late := g.landed
	g.landed = nil
	g.mu.Unlock()
	if err != nil {
		return
	}
	// What the late calls' senders were told is settled; what the store
	// answers them is nobody's to hear.
	ctx := context.Background()
	for _, c := range late {
		if c.Op == OpPut {
			_, _ = g.inner.Put(ctx, c.Name, c.Data, c.PutOpts)
		} else {
			_ = g.inner.Delete(ctx, c.Name, c.DeleteOpts)
		}
	}
}
