package format

import (
	"fmt"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// A log entry (protocol v2) is one blob of the shard's commit log, at
// LogName(shard, position), created once with If-None-Match: *. It uses
// the generation framing, so that the reader's footer, filter and record
// code, and its caches, serve log batches and generations alike. Its footer
// has generation 0 and says what the entry is:
//
//   - a batch: the records of one commit, with the epoch, writer and put id
//     of the writer that created it, and next_seq, one past its last seq;
//   - a fence: no records; a new writer's claim on the log, with its epoch
//     and the seq the log continues at.

// LogEntry describes the log entry a writer creates.
type LogEntry struct {
	Shard    string
	Epoch    uint64
	Position uint64
	Writer   string
	PutID    string
	NextSeq  uint64
	Created  int64 // Unix nanoseconds
}

// NewLogBatchBuilder starts the batch at e.Position; add its records in seq
// order, then Finish. e.NextSeq is set from the records by Finish.
func NewLogBatchBuilder(e LogEntry, sizeHint int) *GenerationBuilder {
	b := NewGenerationBuilder(e.Shard, e.Epoch, 0, sizeHint)
	b.footer.Position, b.footer.Writer, b.footer.PutId = e.Position, e.Writer, e.PutID
	b.footer.CreatedUnixNanos = e.Created
	b.log = true
	return b
}

// EncodeFence encodes the fence e.
func EncodeFence(e LogEntry) (Layout, error) {
	b := NewGenerationBuilder(e.Shard, e.Epoch, 0, 0)
	b.footer.Position, b.footer.Writer, b.footer.PutId = e.Position, e.Writer, e.PutID
	b.footer.Fence, b.footer.NextSeq = true, e.NextSeq
	return b.Finish()
}

// DecodeLogEntry verifies and parses the whole blob of the shard's log entry
// at position, and returns its footer.
func DecodeLogEntry(shard string, position uint64, data []byte) (*storagepb.Footer, error) {
	l, err := DecodeLogLayout(shard, position, data)
	return l.Footer, err
}

// DecodeLogLayout is DecodeLogEntry, returning where the entry's parts are
// and its decoded id filter, for the caches.
func DecodeLogLayout(shard string, position uint64, data []byte) (Layout, error) {
	l, err := decodeLayout(data)
	if err != nil {
		return Layout{}, err
	}
	if err := CheckLogFooter(l.Footer, shard, position); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// CheckLogFooter verifies that f is the footer of a log entry of shard at
// position.
func CheckLogFooter(f *storagepb.Footer, shard string, position uint64) error {
	switch n := len(f.GetEntries()); {
	case f.GetShard() != shard || f.GetPosition() != position || f.GetGeneration() != 0:
		return fmt.Errorf("%w: log entry names shard %q position %d generation %d, expected %q position %d", ErrCorrupt, f.GetShard(), f.GetPosition(), f.GetGeneration(), shard, position)
	case f.GetEpoch() == 0 || f.GetPutId() == "":
		return fmt.Errorf("%w: log entry at %d: epoch %d, put id %q", ErrCorrupt, position, f.GetEpoch(), f.GetPutId())
	case f.GetNextSeq() == 0:
		return fmt.Errorf("%w: log entry at %d: next seq 0", ErrCorrupt, position)
	case f.GetFence() && n != 0:
		return fmt.Errorf("%w: fence at %d holds %d records", ErrCorrupt, position, n)
	case !f.GetFence() && n == 0:
		return fmt.Errorf("%w: batch at %d holds no records", ErrCorrupt, position)
	case !f.GetFence() && f.GetEntries()[n-1].GetSeq()+1 != f.GetNextSeq():
		return fmt.Errorf("%w: batch at %d: last seq %d, next seq %d", ErrCorrupt, position, f.GetEntries()[n-1].GetSeq(), f.GetNextSeq())
	case !f.GetFence() && f.GetEntries()[0].GetSeq() == 0:
		return fmt.Errorf("%w: batch at %d: seq 0", ErrCorrupt, position)
	}
	return nil
}
