package shard

import (
	"strings"
	"sync"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
)

// putKinds counts a faultstore's puts by kind, "manifest" or "generation"
// (anything else), and can slow them down. It holds the store rather than
// wrapping it: the store the writer sees is the faultstore itself.
type putKinds struct {
	store                  *faultstore.Store
	manifests, generations *faultstore.Counter
	mu                     sync.Mutex
	undelay                func() // removes the delay rule
}

// newHookStore returns a faultstore over inner and the counts of its puts.
func newHookStore(inner blob.Store) (*faultstore.Store, *putKinds) {
	s := faultstore.New(inner, 1)
	puts := []faultstore.Op{faultstore.OpPut}
	return s, &putKinds{
		store:       s,
		manifests:   s.Count(faultstore.Match{Ops: puts, Suffix: "/_manifest"}),
		generations: s.Count(faultstore.Match{Ops: puts, If: func(c faultstore.Call) bool { return !strings.HasSuffix(c.Name, "/_manifest") }}),
	}
}

func (s *putKinds) count(kind string) int {
	if kind == "manifest" {
		return int(s.manifests.N())
	}
	return int(s.generations.N())
}

// setDelay makes every later put wait d first (or until its context ends).
func (s *putKinds) setDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.undelay != nil {
		s.undelay()
	}
	s.undelay = s.store.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Delay, Delay: d})
}
