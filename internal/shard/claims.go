package shard

import (
	"sync"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// claims are the generations that a merge in flight or the commit being
// prepared rewrites, so that the other leaves them alone. The merger claims
// a plan before it reads it, and the output it writes until its edit
// settles; the committer claims the run it folds until its commit settles.
type claims struct {
	mu   sync.Mutex
	held map[format.GenKey]bool // guarded by mu
}

func newClaims() *claims { return &claims{held: map[format.GenKey]bool{}} }

// claimLive claims every generation of plan, or none: it fails if one is
// claimed already or not live in the manifest current returns. current is
// read under the claims' lock: the committer publishes a manifest before it
// releases the generations that manifest folded away, so a generation seen
// unclaimed here is seen gone if it is.
func (c *claims) claimLive(plan []*storagepb.Generation, current func() *storagepb.Manifest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[format.GenKey]bool{}
	for _, g := range current().GetGenerations() {
		live[format.KeyOf(g)] = true
	}
	for _, g := range plan {
		if c.held[format.KeyOf(g)] || !live[format.KeyOf(g)] {
			return false
		}
	}
	for _, g := range plan {
		c.held[format.KeyOf(g)] = true
	}
	return true
}

// claimNewest claims the newest generations of gens, up to the first one
// claimed already, at most maxCount of them and maxBytes in all, and
// returns them; or nil, claiming nothing, if that is fewer than minCount.
func (c *claims) claimNewest(gens []*storagepb.Generation, minCount, maxCount int, maxBytes int64) []*storagepb.Generation {
	c.mu.Lock()
	defer c.mu.Unlock()
	var bytes int64
	i := len(gens)
	for i > 0 && len(gens)-i < maxCount && !c.held[format.KeyOf(gens[i-1])] {
		b := int64(gens[i-1].GetBytes())
		if bytes+b > maxBytes {
			break
		}
		bytes += b
		i--
	}
	run := gens[i:]
	if len(run) < minCount {
		return nil
	}
	for _, g := range run {
		c.held[format.KeyOf(g)] = true
	}
	return run
}

// add claims one generation.
func (c *claims) add(k format.GenKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held[k] = true
}

// release drops the claims on nums.
func (c *claims) release(keys ...format.GenKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		delete(c.held, k)
	}
}
