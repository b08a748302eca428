package faultstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Partitioned is a blob.Store in front of another that can be cut off from
// it, for a stretch, on some names: a network partition, as one instance
// (or every instance, on the names of one shard) sees it. Unlike a Rule,
// which decides call by call, a cut holds every matching call until it is
// healed, so that a stretch can outlast the caller's retries and timeouts.
// It sits in front of a Store (or any blob.Store): while a cut holds, its
// calls never reach the stores behind it.
type Partitioned struct {
	inner blob.Store

	mu   sync.Mutex
	cuts []*cut
}

var _ blob.Store = (*Partitioned)(nil)

// NewPartitioned wraps inner, with no cut.
func NewPartitioned(inner blob.Store) *Partitioned { return &Partitioned{inner: inner} }

// CutMode is how a cut call fails.
type CutMode int

const (
	// CutFail answers at once with blob.ErrUnavailable: nothing was sent
	// (a refused connection).
	CutFail CutMode = iota + 1
	// CutLose answers writes and deletes at once with
	// blob.ErrOutcomeUnknown and reads with blob.ErrUnavailable, and applies
	// nothing: the request may have been sent, the caller cannot tell (a
	// connection reset).
	CutLose
	// CutHang holds the call until its context ends or the cut heals, then
	// fails it as CutLose does, wrapping the context's error if it ended: a
	// request that went into a black hole.
	CutHang
)

func (m CutMode) String() string {
	switch m {
	case CutFail:
		return "fail"
	case CutLose:
		return "lose"
	case CutHang:
		return "hang"
	}
	return fmt.Sprintf("CutMode(%d)", int(m))
}

// Cut describes one partition.
type Cut struct {
	// Prefixes: the cut holds calls on blob names (for List, listing
	// prefixes) that start with one of them; "" or none cuts every call.
	Prefixes []string
	// Ops limits the cut to these kinds of call; empty means all.
	Ops []Op
	// Mode is how cut calls fail. Required.
	Mode CutMode
}

type cut struct {
	Cut
	healed chan struct{}
}

func (c *cut) matches(op Op, name string) bool {
	if len(c.Ops) > 0 && !slices.Contains(c.Ops, op) {
		return false
	}
	if len(c.Prefixes) == 0 {
		return true
	}
	return slices.ContainsFunc(c.Prefixes, func(p string) bool { return strings.HasPrefix(name, p) })
}

// Cut starts a partition; heal ends it (idempotent). Calls held by a
// CutHang cut then fail at once: their requests are lost, not resumed.
func (p *Partitioned) Cut(c Cut) (heal func()) {
	if c.Mode < CutFail || c.Mode > CutHang {
		panic(fmt.Sprintf("faultstore: cut mode %v", c.Mode))
	}
	st := &cut{Cut: c, healed: make(chan struct{})}
	p.mu.Lock()
	p.cuts = append(p.cuts, st)
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			p.cuts = slices.DeleteFunc(p.cuts, func(x *cut) bool { return x == st })
			p.mu.Unlock()
			close(st.healed)
		})
	}
}

// Cuts reports how many cuts hold.
func (p *Partitioned) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cuts)
}

// check fails a call that a cut holds; nil lets it through. An invalid
// name passes, as in Store: a real backend rejects it before any I/O.
func (p *Partitioned) check(ctx context.Context, op Op, name string) error {
	valid := blob.ValidateName(name) == nil
	if op == OpList {
		valid = blob.ValidatePrefix(name) == nil
	}
	if !valid {
		return nil
	}
	p.mu.Lock()
	var hit *cut
	for _, c := range p.cuts {
		if c.matches(op, name) {
			hit = c
			break
		}
	}
	p.mu.Unlock()
	if hit == nil {
		return nil
	}
	class := blob.ErrUnavailable
	if hit.Mode != CutFail && (op == OpPut || op == OpDelete) {
		class = blob.ErrOutcomeUnknown
	}
	if hit.Mode == CutHang {
		select {
		case <-ctx.Done():
			return fmt.Errorf("faultstore: %s %q: partitioned (hung): %w: %w", op, name, class, ctx.Err())
		case <-hit.healed:
		}
	}
	return fmt.Errorf("faultstore: %s %q: partitioned (%v): %w", op, name, hit.Mode, class)
}

// Get implements blob.Store.
func (p *Partitioned) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	if err := p.check(ctx, OpGet, name); err != nil {
		return nil, blob.Attrs{}, err
	}
	return p.inner.Get(ctx, name, opts)
}

// Head implements blob.Store.
func (p *Partitioned) Head(ctx context.Context, name string) (blob.Attrs, error) {
	if err := p.check(ctx, OpHead, name); err != nil {
		return blob.Attrs{}, err
	}
	return p.inner.Head(ctx, name)
}

// Put implements blob.Store.
func (p *Partitioned) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	if err := p.check(ctx, OpPut, name); err != nil {
		return blob.Attrs{}, err
	}
	return p.inner.Put(ctx, name, data, opts)
}

// Delete implements blob.Store.
func (p *Partitioned) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	if err := p.check(ctx, OpDelete, name); err != nil {
		return err
	}
	return p.inner.Delete(ctx, name, opts)
}

// List implements blob.Store; a cut holds a listing with a delimiter too.
func (p *Partitioned) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	if err := p.check(ctx, OpList, opts.Prefix); err != nil {
		return blob.ListPage{}, err
	}
	return p.inner.List(ctx, opts)
}
