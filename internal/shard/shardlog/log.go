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
	v := viewHead(ckpt, ckpt.GetGenerations()[:len(ckpt.GetGenerations()):len(ckpt.GetGenerations())])
	for _, e := range tail {
		addToView(v, e)
	}
	// Capped like Extend's views, so that no one appends into its room.
	v.Generations = v.Generations[:len(v.Generations):len(v.Generations)]
	return v
}

// Extend is ViewOf(ckpt, append(tail, e)) for view, which is
// ViewOf(ckpt, tail), without copying the generations view shares with
// its checkpoint: gens holds view's generations and may have room to
// spare, which Extend appends e's generation into. It returns the new view
// and its generations for the next call. Views share the room of gens,
// which only grows at its end, and each is capped at its own length, so
// no view ever sees another's change and none can append into the room.
// gens must be the caller's own, from the previous Extend on this view,
// or nil (Extend then copies the view's).
func Extend(view *storagepb.Manifest, gens []*storagepb.Generation, e *Entry) (*storagepb.Manifest, []*storagepb.Generation) {
	if gens == nil {
		gens = append(make([]*storagepb.Generation, 0, 2*len(view.GetGenerations())+8), view.GetGenerations()...)
	}
	if e.Gen != nil {
		gens = append(gens, e.Gen)
	}
	v := viewHead(view, gens[:len(gens):len(gens)])
	v.NextSeq = max(v.NextSeq, e.NextSeq)
	if e.Gen != nil {
		v.RecordCount += uint64(e.Gen.GetRecords())
		v.LastCommitUnixNanos = max(v.LastCommitUnixNanos, e.Gen.GetCreatedUnixNanos())
	}
	return v, gens
}

// addToView adds e to v, whose generations are v's own.
func addToView(v *storagepb.Manifest, e *Entry) {
	v.NextSeq = max(v.NextSeq, e.NextSeq)
	if e.Gen != nil {
		v.Generations = append(v.Generations, e.Gen)
		v.RecordCount += uint64(e.Gen.GetRecords())
		v.LastCommitUnixNanos = max(v.LastCommitUnixNanos, e.Gen.GetCreatedUnixNanos())
	}
}

// viewHead is a copy of m's fields, with gens as its generations.
func viewHead(m *storagepb.Manifest, gens []*storagepb.Generation) *storagepb.Manifest {
	return &storagepb.Manifest{
		Epoch:            m.GetEpoch(),
		Owner:            m.GetOwner(),
		NextGeneration:   m.GetNextGeneration(),
		NextSeq:          m.GetNextSeq(),
		Generations:      gens,
		RetiredBatches:   m.GetRetiredBatches(),
		RetiredRuns:      m.GetRetiredRuns(),
		Epochs:           m.GetEpochs(),
		CommitId:         m.GetCommitId(),
		UpdatedUnixNanos: m.GetUpdatedUnixNanos(),
		RecordCount:      m.GetRecordCount(),
		LogCheckpoint:    m.GetLogCheckpoint(),
		Protocol:         m.GetProtocol(),

		Incarnation:         m.GetIncarnation(),
		Tombstone:           m.GetTombstone(),
		CreatedUnixNanos:    m.GetCreatedUnixNanos(),
		LastCommitUnixNanos: m.GetLastCommitUnixNanos(),
		DeletedThroughEpoch: m.GetDeletedThroughEpoch(),
	}
}
