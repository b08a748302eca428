package shard

import (
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// epochRecord returns the manifest's record of epoch, or nil.
func epochRecord(m *storagepb.Manifest, epoch uint64) *storagepb.EpochRecord {
	for i := len(m.GetEpochs()) - 1; i >= 0; i-- {
		if r := m.GetEpochs()[i]; r.GetEpoch() == epoch {
			return r
		}
	}
	return nil
}

// commitState says what a re-read manifest proves about one commit attempt.
type commitState int

const (
	notCommitted commitState = iota
	committed
	undecidable // the epoch's record was pruned: the manifest cannot tell
)

// commitStatus decides, from a manifest read after the attempt, whether the
// generation gen written under epoch was committed. Either the manifest
// still lists it, or the epoch's record names it as that epoch's last
// commit; the latter survives both a merge that absorbed the generation and
// a later claim by another writer. The committer resolves each attempt
// before it starts the next, so "last" pins the generation exactly.
func commitStatus(m *storagepb.Manifest, epoch, gen uint64) commitState {
	for _, g := range m.GetGenerations() {
		if g.GetEpoch() == epoch && g.GetNumber() == gen {
			return committed
		}
	}
	r := epochRecord(m, epoch)
	switch {
	case r == nil && m.GetEpoch() != epoch:
		return undecidable
	case r != nil && r.GetLastGeneration() == gen:
		return committed
	}
	return notCommitted
}

// isV2 reports whether m is a protocol v2 manifest: a checkpoint of the log.
func isV2(m *storagepb.Manifest) bool { return m.GetProtocol() == format.ProtocolV2 }
