package shard

import (
	"errors"
	"fmt"
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The shard lifecycle (DeleteShard, DescribeShard, ListShards, BatchGet)
// lives in its own files: lifecycle.go (the states), delete.go,
// read/describe.go, list.go and read/batchget.go. It touches the writer in two
// places only: a claim on a tombstone starts the next incarnation
// (epoch.go calls startIncarnation), and a commit that adds records
// stamps the manifest's last-commit time (prepare.go).
//
// A shard's life, in its manifest:
//
//	live (incarnation n) --DeleteShard--> tombstone (incarnation n+1, epoch+1)
//	tombstone --claim by a writer--> live (incarnation n+1, epoch+2)
//
// The tombstone is a claim: it takes the next epoch by the same manifest
// CAS every claim uses, so every writer of the old incarnation, on any
// instance, is fenced by it exactly as by a takeover; it keeps next_seq,
// so the next incarnation's seqs continue above the deleted ones.

var (
	// ErrShardDeleted: the shard was deleted (it is a tombstone, or a
	// reader saw it replaced by a later incarnation). Its records are gone.
	ErrShardDeleted = shardlog.ErrShardDeleted
	// ErrSeqMismatch: DeleteShard's expected last seq is not the shard's.
	// Errors of this class are *SeqMismatchError values.
	ErrSeqMismatch = errors.New("shard's last seq is not the expected one")
)

// SeqMismatchError is a delete refused because the shard moved on since
// the caller looked.
type SeqMismatchError struct {
	Shard             string
	Expected, LastSeq uint64
}

func (e *SeqMismatchError) Error() string {
	return fmt.Sprintf("shard %q: last seq is %d, not the expected %d: records were appended since; nothing deleted", e.Shard, e.LastSeq, e.Expected)
}

// Is makes errors.Is(err, ErrSeqMismatch) true.
func (e *SeqMismatchError) Is(target error) bool { return target == ErrSeqMismatch }

// startIncarnation makes next, a manifest being claimed, the first
// manifest of an incarnation: of a new shard, or of one whose tombstone it
// replaces. The incarnation number, next_seq, next_generation and the
// epoch records carry on.
func startIncarnation(next *storagepb.Manifest, now time.Time) {
	next.Tombstone = nil
	next.CreatedUnixNanos = now.UnixNano()
	next.LastCommitUnixNanos = 0
}
