package faultstore

import (
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Partition cuts every call on names (or listing prefixes) that start with
// prefix, as a network partition between the caller and that part of the
// store does, until heal is called. No cut call reaches the inner store,
// but the caller cannot know that: a cut write fails with
// blob.ErrOutcomeUnknown, a cut read with blob.ErrUnavailable. With hang,
// calls block until heal or until their context ends (then with its
// error), as requests into a partition that drops packets do; without,
// they fail at once, as into one that resets connections.
//
// The partition's rules come after the existing ones: a rule added before
// that decides a call's outcome takes precedence. heal is idempotent.
func (s *Store) Partition(prefix string, hang bool) (heal func()) {
	fault := Fail
	if hang {
		fault = Hang
	}
	healed := make(chan struct{})
	removeWrites := s.Add(Rule{Ops: []Op{OpPut, OpDelete}, Prefix: prefix, Fault: fault, Err: blob.ErrOutcomeUnknown, Until: healed})
	removeReads := s.Add(Rule{Ops: []Op{OpGet, OpHead, OpList}, Prefix: prefix, Fault: fault, Err: blob.ErrUnavailable, Until: healed})
	var once sync.Once
	return func() {
		once.Do(func() {
			removeWrites()
			removeReads()
			close(healed)
		})
	}
}
