package shard

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

func gensOf(epoch uint64, numbers ...uint64) []*storagepb.Generation {
	out := make([]*storagepb.Generation, len(numbers))
	for i, n := range numbers {
		out[i] = &storagepb.Generation{Epoch: epoch, Number: n}
	}
	return out
}

func retiredKeys(m *storagepb.Manifest) []genKey {
	var out []genKey
	eachRetired(m, func(k genKey, _ int64) bool { out = append(out, k); return true })
	return out
}

// Consecutive retirements, as a lone client's folds make them, take one
// entry however many there are; gaps, other epochs and a new second start
// new ones.
func TestRetiredListKeepsRuns(t *testing.T) {
	m := &storagepb.Manifest{}
	for n := uint64(10); n < 1010; n += 3 {
		retire(m, gensOf(2, n, n+1, n+2), 0)
	}
	if len(m.RetiredRuns) != 1 || m.RetiredRuns[0].Count != 1002 || retiredCount(m) != 1002 {
		t.Fatalf("1,002 consecutive retirements took %v (count %d), want one run", m.RetiredRuns, retiredCount(m))
	}
	retire(m, gensOf(2, 2000), 0)                        // a gap
	retire(m, gensOf(3, 2001), 0)                        // another epoch
	retire(m, gensOf(3, 2002), int64(retireBatchWindow)) // a second later
	want := []*storagepb.RetiredRun{
		{RetiredUnixNanos: 0, Epoch: 2, First: 10, Count: 1002},
		{RetiredUnixNanos: 0, Epoch: 2, First: 2000, Count: 1},
		{RetiredUnixNanos: 0, Epoch: 3, First: 2001, Count: 1},
		{RetiredUnixNanos: int64(retireBatchWindow), Epoch: 3, First: 2002, Count: 1},
	}
	if !slices.EqualFunc(m.RetiredRuns, want, func(a, b *storagepb.RetiredRun) bool { return proto.Equal(a, b) }) {
		t.Fatalf("runs %v, want %v", m.RetiredRuns, want)
	}

	// Forgetting some splits a run around them, keeping the order.
	forget(m, map[genKey]bool{{2, 10}: true, {2, 500}: true, {3, 2001}: true})
	var wantKeys []genKey
	for n := uint64(11); n < 1012; n++ {
		if n != 500 {
			wantKeys = append(wantKeys, genKey{2, n})
		}
	}
	wantKeys = append(wantKeys, genKey{2, 2000}, genKey{3, 2002})
	if got := retiredKeys(m); !slices.Equal(got, wantKeys) {
		t.Fatalf("after forgetting: %d generations, want %d", len(got), len(wantKeys))
	}
	if len(m.RetiredRuns) != 4 || m.RetiredRuns[0].Count != 489 || m.RetiredRuns[1].First != 501 || m.RetiredRuns[1].Count != 511 {
		t.Fatalf("runs after forgetting: %v", m.RetiredRuns)
	}
	due, backlog := dueRetired(m, int64(retireBatchWindow), int64(retireBatchWindow), 600)
	if backlog != 1001 || len(due) != 600 || due[0] != (genKey{2, 11}) {
		t.Fatalf("due at 1 s with 1 s grace: %d of %d, first %v; want 600 of 1001 (the last run is not due), from 2/11", len(due), backlog, due[0])
	}
}

// Batches in the older form are read, counted, listed as due and forgotten
// beside the runs; new retirements never go to them.
func TestRetiredListReadsOlderBatches(t *testing.T) {
	m := &storagepb.Manifest{RetiredBatches: []*storagepb.RetiredBatch{{Epochs: []uint64{1, 1}, Numbers: []uint64{4, 5}}}}
	retire(m, gensOf(1, 6), 0)
	if got := retiredKeys(m); !slices.Equal(got, []genKey{{1, 4}, {1, 5}, {1, 6}}) || retiredCount(m) != 3 {
		t.Fatalf("retired %v (count %d), want 1/4, 1/5, 1/6", got, retiredCount(m))
	}
	if len(m.RetiredBatches[0].Numbers) != 2 {
		t.Fatal("a new retirement went to the older batches")
	}
	if due, backlog := dueRetired(m, 10, 5, 10); backlog != 3 || len(due) != 3 {
		t.Fatalf("due %v of %d, want all 3", due, backlog)
	}
	forget(m, map[genKey]bool{{1, 4}: true, {1, 6}: true})
	if got := retiredKeys(m); !slices.Equal(got, []genKey{{1, 5}}) || len(m.RetiredRuns) != 0 {
		t.Fatalf("after forgetting 4 and 6: %v, runs %v", got, m.RetiredRuns)
	}
}
