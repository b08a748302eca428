package shard

import (
	"errors"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// A log batch whose bytes fail their check is corrupt only when a whole
// read shows it: when that read fails, the answer is the read's failure,
// not DATA_LOSS (the race hunter met this after a late fence, with the
// re-read cut short by a storage fault).
func TestCorruptOrReplacedIsUndecidedWhenTheReReadFails(t *testing.T) {
	const shardName = "s"
	ctx := t.Context()
	name := format.LogName(shardName, 3)
	fence, err := format.EncodeFence(format.LogEntry{Shard: shardName, Epoch: 2, Position: 3, Writer: "w2", PutID: "fence", NextSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New()
	if _, err := mem.Put(ctx, name, fence.Data, blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fs := faultstore.New(mem, 1)
	listed := &storagepb.Generation{Position: 3, PutId: "batch"}
	checkErr := errors.New("checksum mismatch")

	// The whole read shows a late fence: the batch is gone, so the caller
	// reads the view again.
	if err := shardlog.NewSource(fs, NewBlobCache(1<<20), shardName).CorruptOrReplaced(ctx, listed, name, checkErr); !errors.Is(err, blob.ErrNotFound) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("a fence in the listed batch's position: %v, want a not-found, not ErrCorrupt", err)
	}

	// The whole read fails: undecided, the storage error, never ErrCorrupt.
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: name, Fault: faultstore.Fail, Count: 1})
	err = shardlog.NewSource(fs, NewBlobCache(1<<20), shardName).CorruptOrReplaced(ctx, listed, name, checkErr)
	if errors.Is(err, ErrCorrupt) || !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("the re-read failed: %v, want blob.ErrUnavailable and not ErrCorrupt", err)
	}

	// The whole read shows the listed batch's own position holding bytes
	// that are no log entry: corrupt.
	if _, err := mem.Put(ctx, name, []byte("garbage"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := shardlog.NewSource(fs, NewBlobCache(1<<20), shardName).CorruptOrReplaced(ctx, listed, name, checkErr); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbage in the position: %v, want ErrCorrupt", err)
	}
}
