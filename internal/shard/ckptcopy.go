package shard

import (
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// checkpointCopy is a copy of view for the next checkpoint to edit, which
// shares view's generations instead of cloning them: no one changes a
// generation once a manifest lists it (an edit replaces it in its own
// list), and sharing them lets the checkpointer's encoder keep their
// encodings from one checkpoint to the next. Everything an edit changes in
// place (the retired lists, the epochs) is cloned. It copies every field
// of the manifest; TestCheckpointCopyCopiesEveryField fails when one is
// added and not copied here.
func checkpointCopy(view *storagepb.Manifest) *storagepb.Manifest {
	next := &storagepb.Manifest{
		Epoch:          view.GetEpoch(),
		Owner:          view.GetOwner(),
		NextGeneration: view.GetNextGeneration(),
		NextSeq:        view.GetNextSeq(),
		Generations:    append([]*storagepb.Generation(nil), view.GetGenerations()...),
		RetiredBatches: cloneAll(view.GetRetiredBatches()),
		RetiredRuns:    cloneAll(view.GetRetiredRuns()),
		Epochs:         cloneAll(view.GetEpochs()),

		CommitId:         view.GetCommitId(),
		UpdatedUnixNanos: view.GetUpdatedUnixNanos(),
		RecordCount:      view.GetRecordCount(),
		LogCheckpoint:    view.GetLogCheckpoint(),
		Protocol:         view.GetProtocol(),

		Incarnation:         view.GetIncarnation(),
		CreatedUnixNanos:    view.GetCreatedUnixNanos(),
		LastCommitUnixNanos: view.GetLastCommitUnixNanos(),
		DeletedThroughEpoch: view.GetDeletedThroughEpoch(),
	}
	if t := view.GetTombstone(); t != nil {
		next.Tombstone = proto.CloneOf(t)
	}
	if u := view.ProtoReflect().GetUnknown(); len(u) > 0 {
		next.ProtoReflect().SetUnknown(append([]byte(nil), u...))
	}
	return next
}

// cloneAll is a deep copy of ms, nil for none.
func cloneAll[M proto.Message](ms []M) []M {
	if len(ms) == 0 {
		return nil
	}
	out := make([]M, len(ms))
	for i, m := range ms {
		out[i] = proto.CloneOf(m)
	}
	return out
}
