package read

import (
	"fmt"

	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// cursor is where reads of one shard resume, and what they have seen of
// it. A read by range resumes after seq. Every read pins the incarnation
// it first sees live, so that it never mixes a deleted incarnation's
// records with the next one's (see check).
type cursor struct {
	seq         uint64 // the last seq passed: delivered, or skipped by the caller
	seen        bool   // an incarnation was seen live
	incarnation uint64
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

// deletedError is the error of a read that met a tombstone.
func deletedError(shard string) error {
	return fmt.Errorf("shard %q: %w", shard, shardlog.ErrShardDeleted)
}

// query says which records of a shard a resolve reads.
type query struct {
	// all selects every record after the cursor, in seq order.
	all bool
	// ids, unless all, selects records by id, each read once however
	// often it is repeated.
	ids []string
	// take, for a read by ids, chooses from the ids located in a view
	// (with their footer entries) the ones read; nil reads them all. It is
	// called once for each view read.
	take func(located map[string]*storagepb.FooterEntry) map[string]bool
	// speculate sends the ranged GET of the only id beside the manifest
	// read when the cached view already locates it (Get).
	speculate bool
	// follow: a shard not written yet, or deleted before the cursor saw it
	// live, is waited for (resolve returns having read nothing), not an
	// error.
	follow bool
	// gap: located records of one generation this close to each other are
	// read with one ranged GET, the bytes between them dropped. A read by
	// range reads adjacent records together whatever gap says.
	gap int64
	// readBytes bounds one ranged GET (a single larger record is read
	// whole).
	readBytes int64
	// parallel bounds the ranged GETs in flight. Above 0 they are sent
	// ahead of the one being delivered; 0 reads one at a time, in the
	// caller's goroutine.
	parallel int
}

// span is one ranged GET of records of one generation.
type span struct {
	g          *storagepb.Generation
	entries    []*storagepb.FooterEntry // by offset
	first, end uint64
}
