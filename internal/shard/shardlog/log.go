package shardlog

import (
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Entry is one position of a shard's commit log (protocol v2), as read or
// written: a batch of records, or a fence.
type Entry struct {
	Position uint64
	Epoch    uint64
	Writer   string
	PutID    string
	NextSeq  uint64                // one past the entry's last seq, or a fence's next seq
	Gen      *storagepb.Generation // a batch's descriptor (position set); nil for a fence
	Added    int64                 // when it joined the writer's tail (Unix ns): its checkpoint's clock
}

// Fence reports whether the entry is a fence, which holds no records.
func (e *Entry) Fence() bool { return e.Gen == nil }

// LayoutGeneration is the part of the manifest's descriptor of a blob laid
// out as l that the layout itself fixes, created at created (Unix ns). Log
// batches and the writer's generations share it; each caller adds where its
// blob sits and which records it holds.
func LayoutGeneration(l format.Layout, created int64) *storagepb.Generation {
	return &storagepb.Generation{
		Bytes:            uint64(len(l.Data)),
		FooterOffset:     l.FooterOffset,
		FooterLength:     l.FooterLength,
		FilterLength:     l.FilterLength,
		FilterCrc32C:     l.FilterCRC,
		CreatedUnixNanos: created,
	}
}

// logGeneration is the manifest's descriptor of a log batch laid out as l.
func logGeneration(position uint64, l format.Layout, created int64) *storagepb.Generation {
	f := l.Footer
	n := len(f.GetEntries())
	g := LayoutGeneration(l, created)
	g.Position = position
	g.PutId = f.GetPutId()
	g.Epoch = f.GetEpoch()
	g.FirstSeq = f.GetEntries()[0].GetSeq()
	g.LastSeq = f.GetEntries()[n-1].GetSeq()
	g.Records = uint32(n)
	return g
}

// ViewOf is the view of the shard: the checkpoint ckpt with the
// log batches of tail (the positions after it) appended as live
// generations. It shares ckpt's parts, which nobody mutates.
func ViewOf(ckpt *storagepb.Manifest, tail []*Entry) *storagepb.Manifest {
	if len(tail) == 0 {
		return ckpt
	}
	v := &storagepb.Manifest{
		Epoch:            ckpt.GetEpoch(),
		Owner:            ckpt.GetOwner(),
		NextGeneration:   ckpt.GetNextGeneration(),
		NextSeq:          ckpt.GetNextSeq(),
		Generations:      ckpt.GetGenerations()[:len(ckpt.GetGenerations()):len(ckpt.GetGenerations())],
		RetiredBatches:   ckpt.GetRetiredBatches(),
		RetiredRuns:      ckpt.GetRetiredRuns(),
		Epochs:           ckpt.GetEpochs(),
		CommitId:         ckpt.GetCommitId(),
		UpdatedUnixNanos: ckpt.GetUpdatedUnixNanos(),
		RecordCount:      ckpt.GetRecordCount(),
		LogCheckpoint:    ckpt.GetLogCheckpoint(),
		Protocol:         ckpt.GetProtocol(),

		Incarnation:         ckpt.GetIncarnation(),
		Tombstone:           ckpt.GetTombstone(),
		CreatedUnixNanos:    ckpt.GetCreatedUnixNanos(),
		LastCommitUnixNanos: ckpt.GetLastCommitUnixNanos(),
		DeletedThroughEpoch: ckpt.GetDeletedThroughEpoch(),
	}
	for _, e := range tail {
		v.NextSeq = max(v.NextSeq, e.NextSeq)
		if e.Gen != nil {
			v.Generations = append(v.Generations, e.Gen)
			v.RecordCount += uint64(e.Gen.GetRecords())
			v.LastCommitUnixNanos = max(v.LastCommitUnixNanos, e.Gen.GetCreatedUnixNanos())
		}
	}
	return v
}
