package shard

import (
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The retired list is the manifest's record of generations that merges and
// folds replaced and GC has yet to delete. It is kept as runs of
// consecutive generation numbers (RetiredBatch.runs): a lone client's
// commits fold and retire generations in order, so at hundreds of commits a
// second the list stays a few entries instead of thousands that every
// manifest write would copy and encode.

// retireBatchWindow groups retirements this close in time into one batch.
const retireBatchWindow = int64(time.Second)

// retire adds gens to the retired list, stamped now.
func retire(m *storagepb.Manifest, gens []*storagepb.Generation, now int64) {
	bs := m.GetRetiredBatches()
	var b *storagepb.RetiredBatch
	if n := len(bs); n > 0 && now-bs[n-1].GetRetiredUnixNanos() < retireBatchWindow {
		b = bs[n-1]
	} else {
		b = &storagepb.RetiredBatch{RetiredUnixNanos: now}
		m.RetiredBatches = append(m.RetiredBatches, b)
	}
	for _, g := range gens {
		addRetired(b, g.GetEpoch(), g.GetNumber())
	}
}

// addRetired appends one generation to b, extending its last run when the
// generation follows it.
func addRetired(b *storagepb.RetiredBatch, epoch, number uint64) {
	if len(b.Runs) < len(b.Numbers) { // written before runs existed
		for range len(b.Numbers) - len(b.Runs) {
			b.Runs = append(b.Runs, 1)
		}
	}
	if n := len(b.Numbers); n > 0 && b.Epochs[n-1] == epoch && b.Numbers[n-1]+b.Runs[n-1] == number {
		b.Runs[n-1]++
		return
	}
	b.Epochs = append(b.Epochs, epoch)
	b.Numbers = append(b.Numbers, number)
	b.Runs = append(b.Runs, 1)
}

// eachRetired calls f for every generation in b, in order, until f returns
// false. It reports whether it went through all of them.
func eachRetired(b *storagepb.RetiredBatch, f func(genKey) bool) bool {
	runs := b.GetRuns()
	for i, num := range b.GetNumbers() {
		run := uint64(1)
		if len(runs) > 0 {
			run = runs[i]
		}
		for k := range run {
			if !f(genKey{b.GetEpochs()[i], num + k}) {
				return false
			}
		}
	}
	return true
}

// batchLen is the number of generations in b.
func batchLen(b *storagepb.RetiredBatch) int {
	runs := b.GetRuns()
	if len(runs) == 0 {
		return len(b.GetNumbers())
	}
	n := 0
	for _, r := range runs {
		n += int(r)
	}
	return n
}

// forget removes the generations gc deleted from m's retired list.
func forget(m *storagepb.Manifest, gone map[genKey]bool) {
	kept := m.RetiredBatches[:0:0]
	for _, b := range m.GetRetiredBatches() {
		nb := &storagepb.RetiredBatch{RetiredUnixNanos: b.GetRetiredUnixNanos()}
		eachRetired(b, func(k genKey) bool {
			if !gone[k] {
				addRetired(nb, k.epoch, k.number)
			}
			return true
		})
		if len(nb.Numbers) > 0 {
			kept = append(kept, nb)
		}
	}
	m.RetiredBatches = kept
}

// retiredCount is the number of generations awaiting deletion.
func retiredCount(m *storagepb.Manifest) int {
	n := 0
	for _, b := range m.GetRetiredBatches() {
		n += batchLen(b)
	}
	return n
}
