package read

import (
	"fmt"

	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// deletedError is the error of a read that met a tombstone.
func deletedError(shard string) error {
	return fmt.Errorf("shard %q: %w", shard, shardlog.ErrShardDeleted)
}

// check checks m, a view a read just took, against the incarnation the
// cursor reads. A cursor reads one incarnation: the first it sees live. A
// deleted shard's records are gone, so a read that meets a tombstone or a
// later incarnation ends with ErrShardDeleted; a follower (follow) that
// has seen nothing live yet waits for the shard to be written, as it waits
// for a shard never written (wait).
func (c *cursor) check(shard string, m *storagepb.Manifest, follow bool) (wait bool, err error) {
	switch {
	case c.seen && (m.GetIncarnation() != c.incarnation || m.GetTombstone() != nil):
		return false, deletedError(shard)
	case c.seen:
		return false, nil
	case m.GetTombstone() != nil && follow:
		return true, nil
	case m.GetTombstone() != nil:
		return false, deletedError(shard)
	}
	c.seen, c.incarnation = true, m.GetIncarnation()
	return false, nil
}
