package shard

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/rolloutd/rolloutd/internal/clock"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// encodeTestCommitter is a committer whose writer has what encodeBatch
// reads, and no goroutines.
func encodeTestCommitter() *committer {
	w := &writer{shard: "s", epoch: 3, id: "w1", opts: Options{}.withDefaults()}
	w.committer = committer{w: w}
	return &w.committer
}

// encodeTestBatch is n pending appends of one 1 KiB entry each.
func encodeTestBatch(t testing.TB, n int) []*pending {
	live := make([]*pending, n)
	for i := range live {
		e := kib1Entry(t, fmt.Sprint("id-", i))
		live[i] = &pending{ctx: context.Background(), entries: []Entry{e}, bytes: e.size(), done: make(chan struct{})}
	}
	return live
}

// TestEncodeBatchAllocatesResultsOncePerBatch: a group commit's results
// cost one allocation, not one (and a map's) per append. With a slice per
// append and a map of them, encodeBatch allocated 66 more than the
// builder alone for 64 appends.
func TestEncodeBatchAllocatesResultsOncePerBatch(t *testing.T) {
	c := encodeTestCommitter()
	live := encodeTestBatch(t, 64)
	encode := testing.AllocsPerRun(20, func() {
		if _, _, err := c.encodeBatch(live, 7, 100, "w1-1"); err != nil {
			t.Fatal(err)
		}
	})
	// The same bytes through the builder alone: what any encoding costs.
	var hint int64
	for _, p := range live {
		hint += p.bytes
	}
	builder := testing.AllocsPerRun(20, func() {
		b := format.NewLogBatchBuilder(format.LogEntry{Shard: "s", Epoch: 3, Position: 7, Writer: "w1", PutID: "w1-1"}, int(hint))
		seq := uint64(100)
		for _, p := range live {
			for _, e := range p.entries {
				b.AddSuffixed(e.ID, seq, e.Data, seqField(nil, seq), e.ClientHash)
				seq++
			}
		}
		if _, err := b.Finish(); err != nil {
			t.Fatal(err)
		}
	})
	if encode > builder+1 {
		t.Fatalf("encodeBatch of 64 appends: %.0f allocations, the builder alone %.0f: want at most one more, for the results", encode, builder)
	}
}

// TestFinishAllCapsEachAppendsResults: the appends of one commit share one
// array of results; each gets its own run of it, capped, so that a caller
// appending to its results cannot overwrite the next append's.
func TestFinishAllCapsEachAppendsResults(t *testing.T) {
	c := encodeTestCommitter()
	live := encodeTestBatch(t, 2)
	_, results, err := c.encodeBatch(live, 7, 100, "w1-1")
	if err != nil {
		t.Fatal(err)
	}
	finishAll(live, results, nil)
	first, second := live[0].results, live[1].results
	if len(first) != 1 || len(second) != 1 || first[0].ID != "id-0" || second[0].ID != "id-1" || first[0].Seq != 100 || second[0].Seq != 101 {
		t.Fatalf("results %+v and %+v: want id-0 at seq 100, id-1 at 101", first, second)
	}
	_ = append(first, Result{ID: "appended by the caller"})
	if second[0].ID != "id-1" {
		t.Fatalf("appending to the first append's results overwrote the second's: %+v", second[0])
	}
}

// TestPartitionLeavesAllFreshResultsToTheCommit: an append whose entries
// are all fresh makes no results of its own (its commit's are its
// answer); one with an entry found present, or shared with another
// append, gets them, in place of its entries.
func TestPartitionLeavesAllFreshResultsToTheCommit(t *testing.T) {
	w := &writer{shard: "s", inflight: map[string]inflightRef{}}
	es := []Entry{kib1Entry(t, "a"), kib1Entry(t, "b")}
	part, err := w.partitionLocked(es, map[string]shardlog.Found{})
	if err != nil || part.results != nil || len(part.fresh) != 2 {
		t.Fatalf("all fresh: results %v, %d fresh, err %v: want no results, 2 fresh", part.results, len(part.fresh), err)
	}
	present := map[string]shardlog.Found{"b": {Entry: &storagepb.FooterEntry{Id: "b", Seq: 9, ClientHash: es[1].ClientHash}, Gen: &storagepb.Generation{Epoch: 2, Position: 4}}}
	part, err = w.partitionLocked(es, present)
	if err != nil || len(part.results) != 2 || !part.results[1].AlreadyPresent || part.results[1].Seq != 9 || len(part.fresh) != 1 {
		t.Fatalf("b present: results %+v, %d fresh, err %v: want b's result at index 1, a fresh", part.results, len(part.fresh), err)
	}
	w.inflight["a"] = inflightRef{p: &pending{}, hash: es[0].ClientHash}
	part, err = w.partitionLocked(es, map[string]shardlog.Found{})
	if err != nil || len(part.results) != 2 || len(part.waits) != 1 || len(part.fresh) != 1 {
		t.Fatalf("a in flight: results %+v, %d waits, %d fresh, err %v: want results for both, a shared, b fresh", part.results, len(part.waits), len(part.fresh), err)
	}
}

// legacyWithSeq is how encodeBatch stored a record before it passed the
// builder the record and its seq as two parts: joined in a scratch buffer.
func legacyWithSeq(dst []byte, e Entry, seq uint64) []byte {
	dst = append(dst, e.Data...)
	dst = protowire.AppendTag(dst, fieldSeq, protowire.VarintType)
	return protowire.AppendVarint(dst, seq)
}

// TestEncodeBatchMatchesLegacyPath: the batch encodeBatch writes is byte
// for byte the one it wrote when it joined each record and its seq first,
// for seqs of every varint width.
func TestEncodeBatchMatchesLegacyPath(t *testing.T) {
	c := encodeTestCommitter()
	now := time.Unix(1_800_000_000, 5)
	c.w.opts.Clock = clock.NewFake(now)
	live := encodeTestBatch(t, 3)
	live[1].entries = append(live[1].entries, kib1Entry(t, "second-of-two"))
	for _, seq := range []uint64{1, 127, 128, 1 << 35, 1<<64 - 8} {
		l, _, err := c.encodeBatch(live, 7, seq, "w1-1")
		if err != nil {
			t.Fatal(err)
		}
		b := format.NewLogBatchBuilder(format.LogEntry{Shard: "s", Epoch: 3, Position: 7, Writer: "w1", PutID: "w1-1", Created: now.UnixNano()}, 0)
		var scratch []byte
		s := seq
		for _, p := range live {
			for _, e := range p.entries {
				scratch = legacyWithSeq(scratch[:0], e, s)
				b.Add(e.ID, s, scratch, e.ClientHash)
				s++
			}
		}
		want, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(l.Data, want.Data) {
			t.Fatalf("seq %d: encodeBatch wrote %d bytes that differ from the legacy path's %d", seq, len(l.Data), len(want.Data))
		}
	}
}
