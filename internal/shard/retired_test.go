package shard

import (
	"slices"
	"testing"

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
	for _, b := range m.GetRetiredBatches() {
		eachRetired(b, func(k genKey) bool { out = append(out, k); return true })
	}
	return out
}

// Consecutive retirements, as a lone client's folds make them, take one
// entry however many there are; gaps and other epochs start new ones.
func TestRetiredListKeepsRuns(t *testing.T) {
	m := &storagepb.Manifest{}
	for n := uint64(10); n < 1010; n += 3 {
		retire(m, gensOf(2, n, n+1, n+2), 0)
	}
	if len(m.RetiredBatches) != 1 || len(m.RetiredBatches[0].Numbers) != 1 {
		t.Fatalf("1,002 consecutive retirements took %v, want one run", m.RetiredBatches)
	}
	if got := retiredCount(m); got != 1002 {
		t.Fatalf("retiredCount = %d, want 1002", got)
	}
	retire(m, gensOf(2, 2000), 0) // a gap
	retire(m, gensOf(3, 2001), 0) // another epoch
	b := m.RetiredBatches[0]
	if !slices.Equal(b.Numbers, []uint64{10, 2000, 2001}) || !slices.Equal(b.Runs, []uint64{1002, 1, 1}) || !slices.Equal(b.Epochs, []uint64{2, 2, 3}) {
		t.Fatalf("batch %v", b)
	}

	// Forgetting some splits the run around them, keeping the order.
	forget(m, map[genKey]bool{{2, 10}: true, {2, 500}: true, {3, 2001}: true})
	got := retiredKeys(m)
	want := []genKey{}
	for n := uint64(11); n < 1012; n++ {
		if n != 500 {
			want = append(want, genKey{2, n})
		}
	}
	want = append(want, genKey{2, 2000})
	if !slices.Equal(got, want) {
		t.Fatalf("after forgetting: %d generations %v...; want %d", len(got), got[:min(len(got), 3)], len(want))
	}
	if b := m.RetiredBatches[0]; !slices.Equal(b.Runs, []uint64{489, 511, 1}) {
		t.Fatalf("runs after forgetting %v, want [489 511 1]", b.Runs)
	}
	forget(m, map[genKey]bool{})
	if len(retiredKeys(m)) != len(want) {
		t.Fatal("forgetting nothing changed the list")
	}
}

// A batch written before runs existed reads as one generation per entry,
// and gains runs when a retirement is added to it.
func TestRetiredListReadsBatchesWithoutRuns(t *testing.T) {
	m := &storagepb.Manifest{RetiredBatches: []*storagepb.RetiredBatch{{Epochs: []uint64{1, 1}, Numbers: []uint64{4, 5}}}}
	if got := retiredKeys(m); !slices.Equal(got, []genKey{{1, 4}, {1, 5}}) || retiredCount(m) != 2 {
		t.Fatalf("old batch reads as %v (count %d)", got, retiredCount(m))
	}
	retire(m, gensOf(1, 6), 0)
	if got := retiredKeys(m); !slices.Equal(got, []genKey{{1, 4}, {1, 5}, {1, 6}}) {
		t.Fatalf("after adding 6: %v", got)
	}
}
