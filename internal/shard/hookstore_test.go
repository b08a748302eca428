package shard

import (
	"strings"
	"sync"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
)

// hookStore is a faultstore that counts puts by kind: "manifest" or
// "generation" (anything else).
type hookStore struct {
	*faultstore.Store
	manifests, generations *faultstore.Counter
	mu                     sync.Mutex
	undelay                func() // removes the delay rule
}

func newHookStore(inner blob.Store) *hookStore {
	s := faultstore.New(inner, 1)
	puts := []faultstore.Op{faultstore.OpPut}
	return &hookStore{
		Store:       s,
		manifests:   s.Count(faultstore.Match{Ops: puts, Suffix: "/_manifest"}),
		generations: s.Count(faultstore.Match{Ops: puts, If: func(c faultstore.Call) bool { return !strings.HasSuffix(c.Name, "/_manifest") }}),
	}
}

func (s *hookStore) count(kind string) int {
	if kind == "manifest" {
		return int(s.manifests.N())
	}
	return int(s.generations.N())
}

// setDelay makes every later put wait d first (or until its context ends).
func (s *hookStore) setDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.undelay != nil {
		s.undelay()
	}
	s.undelay = s.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Delay, Delay: d})
}
