package shardlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// ReadManifest reads and decodes the shard's manifest. A missing manifest is
// blob.ErrNotFound; undecodable bytes are ErrCorrupt naming the blob.
func ReadManifest(ctx context.Context, store blob.Store, shard string) (*storagepb.Manifest, blob.ETag, error) {
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

// Retryable reports whether a storage error may succeed when retried with
// the same put id.
func Retryable(err error) bool {
	return errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrOutcomeUnknown)
}
