package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrOverBudget: the server holds as many request bytes as its budget (or
// the caller's share of it) allows. Nothing was stored; retry after the
// RetryInfo delay. Its status is RESOURCE_EXHAUSTED with the BACKPRESSURE
// reason. Errors of this class are *OverBudgetError values.
var ErrOverBudget = errors.New("server busy: the request memory budget is spent")

// OverBudgetError is a request refused because admitting it would put the
// bytes held by requests in flight over the budget, or its connection or
// identity over its share.
type OverBudgetError struct {
	// Share is what is spent: "server", "connection" or "identity".
	Share string
	// Need is what the request would hold; Used and Limit are the share's.
	Need, Used, Limit int64
}

func (e *OverBudgetError) Error() string {
	holder := "the server holds"
	switch e.Share {
	case shareConnection:
		holder = "this connection holds its share:"
	case shareIdentity:
		holder = "this client identity holds its share:"
	}
	return fmt.Sprintf("%s: %s %d of %d bytes of requests and responses in flight, and this call needs %d more",
		ErrOverBudget.Error(), holder, e.Used, e.Limit, e.Need)
}

// Is makes errors.Is(err, ErrOverBudget) true.
func (e *OverBudgetError) Is(target error) bool { return target == ErrOverBudget }

// The shares of the budget, as OverBudgetError.Share and refusal reasons.
const (
	shareServer     = "server"
	shareConnection = "connection"
	shareIdentity   = "identity"
)

// budget counts the bytes that requests in flight may hold, for the whole
// process and per connection and client identity, and refuses a charge that
// would put any of them over its limit. It only counts: the admission
// (admission.go) decides what to charge, and when. It is safe for
// concurrent use.
type budget struct {
	limit, connLimit, identityLimit int64

	mu         sync.Mutex
	used       int64            // guarded by mu
	byIdentity map[string]int64 // guarded by mu; no zero entries
	released   chan struct{}    // guarded by mu; made by a waiter, closed (and dropped) when a charge decreases
}

// connUsage is one connection's share of the budget, and what the send
// deadline needs of it (responses.go).
type connUsage struct {
	used int64 // guarded by the budget's mu

	// close closes the connection (its net.Conn); nil when the listener
	// could not tell which it is (see connRegistry).
	close func() error

	mu      sync.Mutex
	pending map[*respCharge]struct{} // guarded by mu: responses handed to the transport
	ended   bool                     // guarded by mu: the transport is closed

	who caller // who the connection's calls come from (client.go)
}

func newBudget(limit, connLimit, identityLimit int64) *budget {
	return &budget{limit: limit, connLimit: connLimit, identityLimit: identityLimit, byIdentity: map[string]int64{}}
}

// charge adds n bytes (n may be negative) to the server, to c and to
// identity. An increase that would put any of them over its limit is
// refused with an *OverBudgetError, and nothing is charged; a decrease
// always succeeds.
func (b *budget) charge(c *connUsage, identity string, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.chargeLocked(c, identity, n)
}

// chargeWait is charge, waiting up to wait (or until ctx is done) for
// other charges to decrease while it does not fit. A refusal is the
// *OverBudgetError of its last try.
func (b *budget) chargeWait(ctx context.Context, c *connUsage, identity string, n int64, wait time.Duration) error {
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		err := b.chargeLocked(c, identity, n)
		if err != nil && b.released == nil {
			b.released = make(chan struct{})
		}
		released := b.released
		b.mu.Unlock()
		if err == nil {
			return nil
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-released:
		case <-timeout:
			return err
		case <-ctx.Done():
			return err
		}
	}
}

// force is charge without a limit: for a response whose bytes exist
// already, where refusing would free nothing.
func (b *budget) force(c *connUsage, identity string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 {
		b.used += n
		c.used += n
		b.byIdentity[identity] += n
		return
	}
	_ = b.chargeLocked(c, identity, n)
}

func (b *budget) chargeLocked(c *connUsage, identity string, n int64) error {
	if n > 0 {
		switch {
		case b.used+n > b.limit:
			return &OverBudgetError{Share: shareServer, Need: n, Used: b.used, Limit: b.limit}
		case c.used+n > b.connLimit:
			return &OverBudgetError{Share: shareConnection, Need: n, Used: c.used, Limit: b.connLimit}
		case b.byIdentity[identity]+n > b.identityLimit:
			return &OverBudgetError{Share: shareIdentity, Need: n, Used: b.byIdentity[identity], Limit: b.identityLimit}
		}
	}
	b.used += n
	c.used += n
	// Only a waiter needs the channel: a decrease with none makes none.
	if n < 0 && b.released != nil {
		close(b.released)
		b.released = nil
	}
	if v := b.byIdentity[identity] + n; v != 0 {
		b.byIdentity[identity] = v
	} else {
		delete(b.byIdentity, identity)
	}
	return nil
}

// inUse is the bytes charged now.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// identities is how many identities hold a charge now.
func (b *budget) identities() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.byIdentity)
}

// Sizing the budget.
const (
	// budgetMemoryFraction is the budget's part of the process's memory
	// limit. The rest is the index cache, the writers' other state, the
	// runtime, and the garbage collector's headroom: with GOGC=100 the
	// heap grows to about twice what is live before a collection.
	// Measured under GOMEMLIMIT=1800MiB with twelve clients holding the
	// whole budget in decoded Appends: peak RSS was 2.3 times the budget
	// (1266 MiB at 0.3; see docs/operations.md, "Memory"). At 0.25 that is
	// about 1.05 GiB, under 60% of a 2 GiB pod.
	budgetMemoryFraction = 0.25
	// DefaultRequestBudgetBytes is the budget when the process has no
	// memory limit (neither GOMEMLIMIT nor a cgroup limit).
	DefaultRequestBudgetBytes = 1 << 30
	// connShareDivisor and identityShareDivisor give the shares of the
	// budget that one connection and one client identity may hold: a
	// quarter and a half, so that one client cannot take it all, and two
	// connections of one client cannot either.
	connShareDivisor     = 4
	identityShareDivisor = 2
)

// cgroupMemoryFiles hold the cgroup memory limit: v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// DefaultRequestBudget is the request budget sized from the process's
// memory limit: budgetMemoryFraction of the smaller of GOMEMLIMIT and the
// cgroup's memory limit, or DefaultRequestBudgetBytes without either. from
// says which limit it used.
func DefaultRequestBudget() (bytes int64, from string) {
	limit, from := memoryLimit()
	if limit <= 0 {
		return DefaultRequestBudgetBytes, "default (no memory limit)"
	}
	return int64(float64(limit) * budgetMemoryFraction), from
}

// memoryLimit is the smaller of GOMEMLIMIT and the cgroup memory limit,
// and which it is; 0 when neither is set.
func memoryLimit() (int64, string) {
	var limit int64
	from := ""
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		limit, from = l, "GOMEMLIMIT"
	}
	for _, f := range cgroupMemoryFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		l, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2), or a page-rounded MaxInt64 (v1): no limit.
		if err != nil || l <= 0 || l >= math.MaxInt64/2 {
			break
		}
		if limit == 0 || l < limit {
			limit, from = l, "cgroup memory limit ("+f+")"
		}
		break
	}
	return limit, from
}

// MinRequestBudget is the smallest request budget for messages of up to
// maxMessageBytes: one connection's share must hold such a request,
// decoded, or it could never be admitted, and its refusal would say to
// retry.
func MinRequestBudget(maxMessageBytes int) int64 {
	return connShareDivisor * (decodedCostFactor*int64(maxMessageBytes) + streamWindow + maxHeaderListBytes)
}

// validateBudget checks the budget against MinRequestBudget.
func (c Config) validateBudget() error {
	if c.RequestBudgetBytes < 0 {
		return fmt.Errorf("server: RequestBudgetBytes must not be negative, got %d", c.RequestBudgetBytes)
	}
	if least := MinRequestBudget(c.MaxMessageBytes); c.RequestBudgetBytes < least {
		return fmt.Errorf("server: a request budget of %d bytes is too small for requests of up to %d bytes: decoded, such a request holds up to %d bytes, more than one connection's share (a quarter of the budget); raise the budget to at least %d bytes, or lower the message limit",
			c.RequestBudgetBytes, c.MaxMessageBytes, least/connShareDivisor, least)
	}
	return nil
}
