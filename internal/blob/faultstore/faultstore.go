// Package faultstore wraps a blob.Store and injects faults: errors, latency,
// hangs and "applied, but the response was lost". The layers above blob use
// it to test what they do when storage misbehaves, deterministically: every
// random choice comes from one seeded generator, and time goes through an
// injectable sleep.
//
// Faults are described by Rules. Each call is matched against the rules in
// the order they were added. Every matching Delay rule that fires adds its
// latency; the first matching rule of any other kind that fires decides the
// outcome. A call whose name (or listing prefix) is invalid is passed to the
// inner store untouched: a real backend rejects it before any I/O, so no I/O
// fault can hit it.
package faultstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Op is a kind of store call.
type Op int

// The kinds of store calls.
const (
	OpGet Op = iota
	OpHead
	OpPut
	OpDelete
	OpList
	numOps
)

// Ops lists every Op.
var Ops = []Op{OpGet, OpHead, OpPut, OpDelete, OpList}

func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpHead:
		return "head"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpList:
		return "list"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Fault is what a rule does to a call.
type Fault int

const (
	// Fail returns Rule.Err (blob.ErrUnavailable by default) without calling
	// the inner store.
	Fail Fault = iota + 1
	// Delay waits Rule.Delay through the store's sleep function, then calls
	// the inner store. If the context ends first, the call is not made and
	// the context's error is returned.
	Delay
	// Hang blocks until the context is done and returns its error, wrapped;
	// the inner store is not called. Use a context with a deadline, or
	// Rule.Until.
	Hang
	// LoseResponse calls the inner store, so the operation takes effect, and
	// then returns an error as if the response had been lost in transit:
	// blob.ErrOutcomeUnknown for puts and deletes, blob.ErrUnavailable for
	// reads (which have no effect to be unsure about).
	LoseResponse
)

func (f Fault) String() string {
	switch f {
	case 0:
		return "none"
	case Fail:
		return "fail"
	case Delay:
		return "delay"
	case Hang:
		return "hang"
	case LoseResponse:
		return "lose-response"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Rule selects calls and the fault to inject into them.
type Rule struct {
	// Ops limits the rule to these kinds of call; empty means all.
	Ops []Op
	// Prefix limits the rule to blob names that start with it; for List,
	// to listing prefixes that start with it. "" matches everything.
	Prefix string
	// Fault is what to do. Required.
	Fault Fault
	// Prob is the chance, in (0, 1], that a matching call gets the fault.
	// 0 means every matching call.
	Prob float64
	// Skip lets the first Skip matching calls through untouched.
	Skip int
	// Count, when positive, retires the rule after it fired Count times:
	// {Count: 1} is "the next matching call".
	Count int
	// Delay is the latency a Delay rule adds.
	Delay time.Duration
	// Err is what a Fail rule returns (wrapped), and a Hang rule whose
	// Until closed; nil means blob.ErrUnavailable. For a LoseResponse rule
	// it replaces the class of the lost answer (a timeout, say).
	Err error
	// Until, for a Hang rule, ends the calls it holds when closed: they
	// fail with Err. Calls already held stay held after the rule is
	// removed, as requests cut by a partition do, until then.
	Until <-chan struct{}
}

func (r *Rule) matches(op Op, name string) bool {
	return (len(r.Ops) == 0 || slices.Contains(r.Ops, op)) && strings.HasPrefix(name, r.Prefix)
}

type rule struct {
	Rule
	seen, fired int
}

// Call describes one call, for hooks.
type Call struct {
	Op Op
	// Name is the blob name, or the prefix for List.
	Name string
	// Fault is the fault injected into the call (0 for none; Delay is
	// reported only when no other fault was chosen).
	Fault Fault
	// Err is the inner store's error (nil on success). Set for After and
	// for OnLanded only.
	Err error

	// The call's arguments, for matchers and hooks. Data is a Put's bytes:
	// read it, never keep or change it.
	Data       []byte
	PutOpts    blob.PutOptions
	GetOpts    blob.GetOptions
	DeleteOpts blob.DeleteOptions
	// Token is a List's page token; once a List landed, Listed holds the
	// names and prefixes its page holds, and Next its next page's token.
	Token, Next string
	Listed      []string
}

// Hooks observe calls. They run on the caller's goroutine, outside the
// Store's locks, so they may call the Store or its inner store.
type Hooks struct {
	// Before runs when a call arrives, before any fault is applied.
	Before func(Call)
	// After runs right after the inner store returned, before the caller
	// gets the result; it does not run when a Fail or Hang fault kept the
	// call from the inner store. With LoseResponse it runs after the write
	// landed and before the lost-response error is returned: the place to
	// let a competing writer in.
	After func(Call)
}

// Store is a blob.Store that injects faults into calls to an inner one.
// It is safe for concurrent use. Decisions are deterministic for a given
// seed and a given order of calls; concurrent callers make the order, and so
// the decisions, depend on scheduling.
type Store struct {
	inner blob.Store
	sleep func(context.Context, time.Duration) error

	mu    sync.Mutex
	rng   *rand.Rand
	rules []*rule
	hooks Hooks
	// Interceptors and watchers, in the order they were added (gate.go).
	counts, intercepts, landed, answers []*matcher

	calls, forwarded, injected [numOps]atomic.Int64
}

var _ blob.Store = (*Store)(nil)

// Option configures New.
type Option func(*Store)

// WithSleep replaces the sleep used by Delay faults (default: a timer that
// stops early, with the context's error, when the context ends). Tests can
// pass a function that records the duration and returns at once.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(s *Store) { s.sleep = sleep }
}

// WithRules adds rules, as Add does.
func WithRules(rules ...Rule) Option {
	return func(s *Store) {
		for _, r := range rules {
			s.rules = append(s.rules, &rule{Rule: r})
		}
	}
}

// WithHooks sets hooks, as SetHooks does.
func WithHooks(h Hooks) Option { return func(s *Store) { s.hooks = h } }

// New wraps inner. seed drives every probabilistic rule.
func New(inner blob.Store, seed int64, opts ...Option) *Store {
	s := &Store{
		inner: inner,
		sleep: sleepCtx,
		rng:   rand.New(rand.NewPCG(uint64(seed), 0x726f6c6c6f757464)),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Inner returns the wrapped store, to act on it without faults (a competing
// writer, say).
func (s *Store) Inner() blob.Store { return s.inner }

// Add adds a rule after the existing ones and returns a function that
// removes it.
func (s *Store) Add(r Rule) (remove func()) {
	st := &rule{Rule: r}
	s.mu.Lock()
	s.rules = append(s.rules, st)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.rules = slices.DeleteFunc(s.rules, func(x *rule) bool { return x == st })
	}
}

// Clear removes every rule.
func (s *Store) Clear() {
	s.mu.Lock()
	s.rules = nil
	s.mu.Unlock()
}

// SetHooks replaces the hooks.
func (s *Store) SetHooks(h Hooks) {
	s.mu.Lock()
	s.hooks = h
	s.mu.Unlock()
}

// Calls returns how many calls of kind op the Store received.
func (s *Store) Calls(op Op) int64 { return s.calls[op].Load() }

// InnerCalls returns how many calls of kind op reached the inner store:
// InnerCalls(OpPut) is the number of blob writes actually issued.
func (s *Store) InnerCalls(op Op) int64 { return s.forwarded[op].Load() }

// Injected returns how many faults (delays included) calls of kind op got.
func (s *Store) Injected(op Op) int64 { return s.injected[op].Load() }

// ResetCounts sets every counter to zero.
func (s *Store) ResetCounts() {
	for i := range numOps {
		s.calls[i].Store(0)
		s.forwarded[i].Store(0)
		s.injected[i].Store(0)
	}
}

// decide picks the faults for one call.
func (s *Store) decide(op Op, name string) (delay time.Duration, chosen *Rule, hooks Hooks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rules {
		if !r.matches(op, name) {
			continue
		}
		if r.Fault != Delay && chosen != nil {
			continue // the outcome is decided; leave this rule's counters alone
		}
		r.seen++
		if r.seen <= r.Skip || (r.Count > 0 && r.fired >= r.Count) {
			continue
		}
		if r.Prob > 0 && r.Prob < 1 && s.rng.Float64() >= r.Prob {
			continue
		}
		r.fired++
		if r.Fault == Delay {
			delay += r.Delay
		} else {
			c := r.Rule
			chosen = &c
		}
	}
	return delay, chosen, s.hooks
}

// do runs one call through the rules. valid reports whether the name passed
// validation; invalid calls go straight to the inner store. injected reports
// that err is an injected fault rather than the inner store's answer.
func (s *Store) do(ctx context.Context, op Op, name string, valid bool, call func(context.Context) error) (injected bool, err error) {
	return s.doCall(ctx, Call{Op: op, Name: name}, valid, call, nil)
}

// doCall is do for a call whose arguments the interceptors may look at.
// out, if not nil, tells what a List returned (Call.Listed).
func (s *Store) doCall(ctx context.Context, c Call, valid bool, call func(context.Context) error, out func() ([]string, string)) (injected bool, err error) {
	op, name := c.Op, c.Name
	s.calls[op].Add(1)
	if !valid {
		s.forwarded[op].Add(1)
		return false, call(ctx)
	}
	s.mu.Lock()
	before := s.hooks.Before
	s.mu.Unlock()
	if before != nil {
		before(Call{Op: op, Name: name})
	}
	if err := s.intercept(ctx, c); err != nil {
		s.injected[op].Add(1)
		return true, fmt.Errorf("faultstore: %s %q: intercepted: %w", op, name, err)
	}
	delay, r, hooks := s.decide(op, name)
	fault := Fault(0)
	if r != nil {
		fault = r.Fault
	}
	if delay > 0 {
		s.injected[op].Add(1)
		if fault == 0 {
			fault = Delay
		}
		if err := s.sleep(ctx, delay); err != nil {
			return true, fmt.Errorf("faultstore: %s %q: during injected delay: %w", op, name, err)
		}
	}
	switch fault {
	case Fail:
		s.injected[op].Add(1)
		err := r.Err
		if err == nil {
			err = blob.ErrUnavailable
		}
		return true, fmt.Errorf("faultstore: %s %q: injected failure: %w", op, name, err)
	case Hang:
		s.injected[op].Add(1)
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("faultstore: %s %q: injected hang: %w", op, name, ctx.Err())
		case <-r.Until:
			err := r.Err
			if err == nil {
				err = blob.ErrUnavailable
			}
			return true, fmt.Errorf("faultstore: %s %q: injected hang, ended: %w", op, name, err)
		}
	}
	s.forwarded[op].Add(1)
	err = call(ctx)
	c.Fault, c.Err = fault, err
	if c.Op == OpList && out != nil {
		c.Listed, c.Next = out()
	}
	s.land(c)
	if hooks.After != nil {
		hooks.After(Call{Op: op, Name: name, Fault: fault, Err: err})
	}
	if fault == LoseResponse {
		s.injected[op].Add(1)
		class := blob.ErrUnavailable
		if op == OpPut || op == OpDelete {
			class = blob.ErrOutcomeUnknown
		}
		if r.Err != nil {
			class = r.Err
		}
		return true, fmt.Errorf("faultstore: %s %q: injected lost response (the store said %v): %w", op, name, errOrOK(err), class)
	}
	return false, err
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	var data []byte
	var a blob.Attrs
	c := Call{Op: OpGet, Name: name, GetOpts: opts}
	injected, err := s.doCall(ctx, c, blob.ValidateName(name) == nil, func(ctx context.Context) (err error) {
		if answer := s.answerer(c); answer != nil {
			data, a, err = answer(c)
			return err
		}
		data, a, err = s.inner.Get(ctx, name, opts)
		return err
	}, nil)
	if injected {
		return nil, blob.Attrs{}, err
	}
	return data, a, err
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	var a blob.Attrs
	injected, err := s.do(ctx, OpHead, name, blob.ValidateName(name) == nil, func(ctx context.Context) (err error) {
		a, err = s.inner.Head(ctx, name)
		return err
	})
	if injected {
		return blob.Attrs{}, err
	}
	return a, err
}

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	var a blob.Attrs
	injected, err := s.doCall(ctx, Call{Op: OpPut, Name: name, Data: data, PutOpts: opts}, blob.ValidateName(name) == nil, func(ctx context.Context) (err error) {
		a, err = s.inner.Put(ctx, name, data, opts)
		return err
	}, nil)
	if injected {
		return blob.Attrs{}, err
	}
	return a, err
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	_, err := s.doCall(ctx, Call{Op: OpDelete, Name: name, DeleteOpts: opts}, blob.ValidateName(name) == nil, func(ctx context.Context) error {
		return s.inner.Delete(ctx, name, opts)
	}, nil)
	return err
}

// List implements blob.Store; a listing with a delimiter is one too (OpList).
func (s *Store) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	var p blob.ListPage
	injected, err := s.doCall(ctx, Call{Op: OpList, Name: opts.Prefix, Token: opts.Token}, blob.ValidatePrefix(opts.Prefix) == nil, func(ctx context.Context) (err error) {
		p, err = s.inner.List(ctx, opts)
		return err
	}, func() ([]string, string) { return listed(p.Items, p.Prefixes), p.Next })
	if injected {
		return blob.ListPage{}, err
	}
	return p, err
}
