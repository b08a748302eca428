package read

import (
	"context"
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Info describes a shard as its manifest records it.
type Info struct {
	Shard         string
	Records       uint64
	Bytes         uint64 // of the live generation blobs
	Generations   int
	FirstSeq      uint64 // lowest live seq; 0 when none is live
	LastSeq       uint64 // highest seq assigned; 0 when none was
	Epoch         uint64
	FormatVersion uint32
	Incarnation   uint64
	Created       time.Time // zero when not recorded
	LastCommit    time.Time // zero when not recorded
	Deleted       bool
	DeletedAt     time.Time
}

// Describe reads the shard's current manifest (a conditional GET when
// cached) and describes it: exact, with no extra read. Errors:
// ErrShardNotFound, ErrShardDeleted (with the tombstone's Info, for a
// listing), ErrCorrupt, a storage error.
func (r *Reader) Describe(ctx context.Context, shard string) (Info, error) {
	m, err := r.Manifest(ctx, shard)
	if err != nil {
		return Info{}, err
	}
	info := describe(shard, m)
	if info.Deleted {
		return info, deletedError(shard)
	}
	return info, nil
}

func describe(shard string, m *storagepb.Manifest) Info {
	info := Info{
		Shard:         shard,
		Records:       m.GetRecordCount(),
		Generations:   len(m.GetGenerations()),
		LastSeq:       m.GetNextSeq() - 1,
		Epoch:         m.GetEpoch(),
		FormatVersion: format.VersionOf(m),
		Incarnation:   m.GetIncarnation(),
		Created:       unixTime(m.GetCreatedUnixNanos()),
		LastCommit:    unixTime(m.GetLastCommitUnixNanos()),
	}
	for i, g := range m.GetGenerations() {
		if i == 0 {
			info.FirstSeq = g.GetFirstSeq()
		}
		info.Bytes += g.GetBytes()
	}
	if ts := m.GetTombstone(); ts != nil {
		info.Deleted = true
		info.DeletedAt = unixTime(ts.GetDeletedUnixNanos())
	}
	return info
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
