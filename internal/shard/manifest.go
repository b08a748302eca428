package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// readManifest reads and decodes the shard's manifest. A missing manifest is
// blob.ErrNotFound; undecodable bytes are ErrCorrupt naming the blob.
func readManifest(ctx context.Context, store blob.Store, shard string) (*storagepb.Manifest, blob.ETag, error) {
	name := format.ManifestName(shard)
	data, attrs, err := store.Get(ctx, name, blob.GetOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("read manifest of shard %q: %w", shard, err)
	}
	m, err := format.DecodeManifest(data)
	if err != nil {
		return nil, "", fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
	}
	return m, attrs.ETag, nil
}

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

// retryable reports whether a storage error may succeed when retried with
// the same put id.
func retryable(err error) bool {
	return errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrOutcomeUnknown)
}
