package shard

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// PresenceBudget bounds, for a whole process, the memory its resident
// writers spend answering "is this id present?" from memory: the ids of
// their own log batches (presence.go) and the id filters they keep
// (filtered.go). Share one per process, as the blob cache is shared: the
// per-writer caps bound one writer, and the budget bounds them all,
// however many shards a pod holds.
//
// A writer charges the budget before it keeps anything. When a charge does
// not fit, the least recently used writers' presence state is dropped
// until the budget is at most 7/8 full (so that the scan for them is paid
// once per eighth of the budget, not per commit); the charge fails when
// even that leaves no room, and after a refusal the search is not repeated
// before some writer gives bytes back or rescanTicks charges have passed. A writer
// whose state was dropped, or that was refused, answers through the
// filters and footers read via the blob cache, the path every inherited
// generation takes: slower, never wrong.
//
// What is charged is an estimate of the bytes the writer keeps reachable
// that it would not otherwise: see ownEntryBytes and filterBytes.
type PresenceBudget struct {
	max int64
	// tick advances on every charge. An account's last use is the tick
	// it last saw: an append stores it without taking mu, and order of
	// last use is all the shedding needs.
	tick atomic.Int64

	mu    sync.Mutex
	used  int64
	accts map[*presenceAccount]struct{}
	sheds int64 // writers whose state was dropped
	scans int64 // searches for writers to drop
	// rescanAt: after a search that left a charge refused, none is made
	// before this tick, nor before some writer gives bytes back (which
	// zeroes it), since until then it would find the same busy writers
	// under b.mu at every charge. A writer that goes idle meanwhile waits
	// at most rescanTicks charges to be shed.
	rescanAt int64
}

// NewPresenceBudget returns a budget of maxBytes.
func NewPresenceBudget(maxBytes int64) *PresenceBudget {
	return &PresenceBudget{max: maxBytes, accts: map[*presenceAccount]struct{}{}}
}

// Bytes returns the bytes charged now: at most the budget.
func (b *PresenceBudget) Bytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// MaxBytes returns the budget.
func (b *PresenceBudget) MaxBytes() int64 { return b.max }

// Sheds returns how many times a writer's presence state was dropped to
// make room for another's.
func (b *PresenceBudget) Sheds() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sheds
}

// presenceAccount is one writer's share of a PresenceBudget. A nil
// account, a writer's without a budget, grants every charge: the
// per-writer caps alone bound it.
//
// Lock order: the writer's mu, then the budget's mu. The budget takes
// another writer's mu only with TryLock, while it holds its own, so two
// writers charging at once never wait for each other: a writer busy under
// its mu is passed over, and the next least recently used is shed.
type presenceAccount struct {
	b    *PresenceBudget
	mu   *sync.Mutex // the writer's
	shed func()      // drops the writer's presence state; called holding mu
	last atomic.Int64

	// Guarded by b.mu.
	held int64
	left bool
}

// join opens an account for a writer whose state mu guards; shed drops
// that state, and is called with mu held, never with the writer's own
// charge in progress.
func (b *PresenceBudget) join(mu *sync.Mutex, shed func()) *presenceAccount {
	if b == nil {
		return nil
	}
	a := &presenceAccount{b: b, mu: mu, shed: shed}
	a.last.Store(b.tick.Load())
	b.mu.Lock()
	b.accts[a] = struct{}{}
	b.mu.Unlock()
	return a
}

// touch marks the writer used now. It is on every append's path: two
// loads, and a store only when some charge advanced the tick since.
func (a *presenceAccount) touch() {
	if a == nil {
		return
	}
	if t := a.b.tick.Load(); a.last.Load() != t {
		a.last.Store(t)
	}
}

// grow charges n more bytes, shedding the least recently used other
// writers if needed, and reports whether the writer may keep them. The
// caller holds the writer's mu.
func (a *presenceAccount) grow(n int64) bool {
	if a == nil {
		return true
	}
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	a.last.Store(b.tick.Add(1))
	if a.left || n > b.max {
		return false
	}
	if b.used+n > b.max && b.tick.Load() >= b.rescanAt {
		b.shedLocked(a, b.max-b.max/8-n)
		if b.used+n > b.max {
			// Refused after shedding every idle writer: the rest are busy.
			b.rescanAt = b.tick.Load() + rescanTicks
		}
	}
	if b.used+n > b.max {
		return false
	}
	b.used += n
	a.held += n
	return true
}

// shedLocked drops the presence state of the least recently used writers
// other than keep, until at most target bytes are charged or none is
// left that can be shed now. The caller holds b.mu.
func (b *PresenceBudget) shedLocked(keep *presenceAccount, target int64) {
	b.scans++
	type victim struct {
		a    *presenceAccount
		last int64
	}
	victims := make([]victim, 0, len(b.accts))
	for v := range b.accts {
		if v != keep && v.held > 0 {
			victims = append(victims, victim{v, v.last.Load()})
		}
	}
	slices.SortFunc(victims, func(x, y victim) int { return cmp.Compare(x.last, y.last) })
	for _, vl := range victims {
		v := vl.a
		if b.used <= target {
			return
		}
		if !v.mu.TryLock() {
			continue // charging, or answering an append: in use, so not idle
		}
		v.shed()
		v.mu.Unlock()
		b.used -= v.held
		v.held = 0
		b.sheds++
	}
}

// rescanTicks is how many charges, at most, pass between two searches that
// cannot make room.
const rescanTicks = 1024

// settle sets the writer's charge to total, the bytes it keeps after it
// forgot some (a checkpoint retired its batches, or its filters). The
// caller holds the writer's mu.
func (a *presenceAccount) settle(total int64) {
	if a == nil {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.setLocked(total)
}

// setLocked sets the charge of an open account to total. The caller
// holds b.mu.
func (a *presenceAccount) setLocked(total int64) {
	if !a.left {
		if total < a.held {
			a.b.rescanAt = 0
		}
		a.b.used += total - a.held
		a.held = total
	}
}

// leave closes the account: the writer answers no more appends, and has
// dropped its state. The caller holds the writer's mu.
func (a *presenceAccount) leave() {
	if a == nil {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	a.setLocked(0)
	a.left = true
	delete(a.b.accts, a)
}

// accounts returns the number of open accounts, for tests.
func (b *PresenceBudget) accounts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.accts)
}
