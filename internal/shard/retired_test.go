package shard

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

func gensOf(epoch uint64, numbers ...uint64) []*storagepb.Generation {
	out := make([]*storagepb.Generation, len(numbers))
	for i, n := range numbers {
		out[i] = &storagepb.Generation{Epoch: epoch, Number: n}
	}
	return out
}

func retiredKeys(m *storagepb.Manifest) []format.GenKey {
	var out []format.GenKey
	eachRetired(m, func(k format.GenKey, _ int64) bool { out = append(out, k); return true })
	return out
}

// Consecutive retirements, as a lone client's folds make them, take one
// run however many there are; gaps and other epochs start new runs, and a
// new second a new batch.
func TestRetiredListKeepsRuns(t *testing.T) {
	m := &storagepb.Manifest{}
	for n := uint64(10); n < 1010; n += 3 {
		retire(m, gensOf(2, n, n+1, n+2), 0)
	}
	if len(m.RetiredRuns) != 1 || !slices.Equal(m.RetiredRuns[0].Counts, []uint64{1002}) || retiredCount(m) != 1002 {
		t.Fatalf("1,002 consecutive retirements took %v (count %d), want one run", m.RetiredRuns, retiredCount(m))
	}
	retire(m, gensOf(2, 2000), 0)                        // a gap
	retire(m, gensOf(3, 2001), 0)                        // another epoch
	retire(m, gensOf(3, 2002), int64(retireBatchWindow)) // a second later
	want := []*storagepb.RetiredRuns{
		{RetiredUnixNanos: 0, Epochs: []uint64{2, 2, 3}, Firsts: []uint64{10, 2000, 2001}, Counts: []uint64{1002, 1, 1}},
		{RetiredUnixNanos: int64(retireBatchWindow), Epochs: []uint64{3}, Firsts: []uint64{2002}, Counts: []uint64{1}},
	}
	if !slices.EqualFunc(m.RetiredRuns, want, func(a, b *storagepb.RetiredRuns) bool { return proto.Equal(a, b) }) {
		t.Fatalf("runs %v, want %v", m.RetiredRuns, want)
	}

	// Forgetting some splits a run around them, keeping the order.
	forget(m, map[format.GenKey]bool{{Epoch: 2, Number: 10}: true, {Epoch: 2, Number: 500}: true, {Epoch: 2, Number: 1011}: true, {Epoch: 3, Number: 2001}: true})
	var wantKeys []format.GenKey
	for n := uint64(11); n < 1011; n++ {
		if n != 500 {
			wantKeys = append(wantKeys, format.GenKey{Epoch: 2, Number: n})
		}
	}
	wantKeys = append(wantKeys, format.GenKey{Epoch: 2, Number: 2000}, format.GenKey{Epoch: 3, Number: 2002})
	if got := retiredKeys(m); !slices.Equal(got, wantKeys) {
		t.Fatalf("after forgetting: %d generations, want %d", len(got), len(wantKeys))
	}
	if b := m.RetiredRuns[0]; !slices.Equal(b.Firsts, []uint64{11, 501, 2000}) || !slices.Equal(b.Counts, []uint64{489, 510, 1}) {
		t.Fatalf("runs after forgetting: %v", b)
	}
	// With a grace of one window, the batch stamped 0 holds retirements up
	// to one window later: it is due only after two.
	const window = int64(retireBatchWindow)
	if due, backlog := dueRetired(m, 2*window-1, window, 600); len(due) != 0 || backlog != 0 {
		t.Fatalf("due before every generation's grace passed: %d", backlog)
	}
	due, backlog := dueRetired(m, 2*window, window, 600)
	if backlog != 1000 || len(due) != 600 || due[0] != (format.GenKey{Epoch: 2, Number: 11}) {
		t.Fatalf("due at 2 windows: %d of %d; want 600 of 1000 (the later batch is not due), from 2/11", len(due), backlog)
	}
	forget(m, map[format.GenKey]bool{{Epoch: 3, Number: 2002}: true})
	if len(m.RetiredRuns) != 1 {
		t.Fatalf("a batch left empty by forgetting stays: %v", m.RetiredRuns)
	}
}

// Batches in the older form are read, counted, listed as due and forgotten
// beside the runs; new retirements never go to them.
func TestRetiredListReadsOlderBatches(t *testing.T) {
	m := &storagepb.Manifest{RetiredBatches: []*storagepb.RetiredBatch{{Epochs: []uint64{1, 1}, Numbers: []uint64{4, 5}}}}
	retire(m, gensOf(1, 6), 0)
	if got := retiredKeys(m); !slices.Equal(got, []format.GenKey{{Epoch: 1, Number: 4}, {Epoch: 1, Number: 5}, {Epoch: 1, Number: 6}}) || retiredCount(m) != 3 {
		t.Fatalf("retired %v (count %d), want 1/4, 1/5, 1/6", got, retiredCount(m))
	}
	if len(m.RetiredBatches[0].Numbers) != 2 {
		t.Fatal("a new retirement went to the older batches")
	}
	if due, backlog := dueRetired(m, 5+int64(retireBatchWindow), 5, 10); backlog != 3 || len(due) != 3 {
		t.Fatalf("due %v of %d, want all 3", due, backlog)
	}
	forget(m, map[format.GenKey]bool{{Epoch: 1, Number: 4}: true, {Epoch: 1, Number: 6}: true})
	if got := retiredKeys(m); !slices.Equal(got, []format.GenKey{{Epoch: 1, Number: 5}}) || len(m.RetiredRuns) != 0 {
		t.Fatalf("after forgetting 4 and 6: %v, runs %v", got, m.RetiredRuns)
	}
}
