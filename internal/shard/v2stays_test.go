package shard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// A v2 shard is never written back in the v1 format (issue 21 section 8):
// a writer in protocol v1 mode (the first step of a rolling upgrade) that
// opens a shard a v2 writer converted claims it in format version 2 and
// commits by creating log positions, never by a manifest CAS over a _g/
// generation; the manifest stays version 2 through its claim, its
// checkpoints, its Close and a second v1-mode writer after it. A build
// that predates v2 would read version 1 and miss the log: so would a v1
// commit's manifest, which lists no log position after its checkpoint.
// The v2 writer ends with its batch checkpointed (Close), or with it in
// the log alone (Abort): a v1 manifest could not even encode the first.
func TestV1ModeWriterKeepsAV2ShardInV2(t *testing.T) {
	for _, end := range []string{"close", "abort"} {
		t.Run(end, func(t *testing.T) { testV1ModeWriterKeepsAV2ShardInV2(t, end == "close") })
	}
}

func testV1ModeWriterKeepsAV2ShardInV2(t *testing.T, closeV2 bool) {
	ctx := context.Background()
	store := memstore.New()
	l := newLedger()
	wantV2 := func(when string) {
		t.Helper()
		raw, _, err := store.Get(ctx, format.ManifestName("s"), blob.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := format.DecodeManifest(raw)
		if err != nil {
			t.Fatal(err)
		}
		if v := format.Version(raw); v != format.ManifestVersionV2 || m.GetProtocol() != format.ProtocolV2 {
			t.Fatalf("%s: manifest format version %d, protocol %d; want version %d, protocol %d", when, v, m.GetProtocol(), format.ManifestVersionV2, format.ProtocolV2)
		}
	}
	opts := testOptions(t)
	opts.CheckpointEvery = 64
	opts.CheckpointInterval = time.Hour
	v2, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, appendIDs(t, v2, "by-v2"))
	if closeV2 {
		if err := v2.Close(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		v2.Abort()
	}
	wantV2("after the v2 writer")

	for i := range 2 {
		opts := testOptionsV1(t)
		opts.CheckpointEvery = 2
		opts.CheckpointInterval = time.Hour
		opts.DisableBackground = true // no merge or GC: every batch stays in the log, to be looked at
		w, err := Open(ctx, store, "s", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		wantV2(fmt.Sprintf("after v1-mode writer %d claimed", i))
		for j := range 5 {
			id := fmt.Sprintf("by-v1-mode-%d-%d", i, j)
			rs := appendIDs(t, w, id)
			l.add(t, rs)
			// The ack is a batch this writer created in the log.
			e, err := shardlog.ReadEntry(ctx, store, NewBlobCache(1<<20), "s", rs[0].Generation, 0)
			if err != nil {
				t.Fatalf("v1-mode writer %d acked %q at position %d, which the log lacks: %v", i, id, rs[0].Generation, err)
			}
			if e.Fence() || e.Epoch != w.Epoch() || e.Gen == nil || e.Gen.GetFirstSeq() != rs[0].Seq {
				t.Fatalf("v1-mode writer %d acked %q (seq %d, epoch %d) at position %d, which holds %+v", i, id, rs[0].Seq, w.Epoch(), rs[0].Generation, e)
			}
		}
		// The checkpointer is its own goroutine: the fifth ack can come
		// before the checkpoint it called for has landed.
		waitFor(t, fmt.Sprintf("v1-mode writer %d's checkpoint after 5 commits with K=2", i), func() bool { return w.Stats().Checkpoints > 0 })
		wantV2(fmt.Sprintf("after v1-mode writer %d checkpointed", i))
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		wantV2(fmt.Sprintf("after v1-mode writer %d closed", i))
	}
	// No v1 commit ever: a v1 commit writes a _g/ generation.
	page, err := store.List(ctx, format.GenerationPrefix("s"), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		t.Errorf("generation %s in _g/, with no merge run: a v1-mode writer committed in v1", it.Name)
	}
	l.verify(t, store, "s")
}
