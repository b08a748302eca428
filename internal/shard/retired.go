package shard

import (
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The retired list is the manifest's record of generations that merges and
// folds replaced and GC has yet to delete. New retirements are kept as runs
// of consecutive generation numbers (Manifest.retired_runs), packed per
// second: folds and merges retire in order, so at hundreds of commits a
// second the list stays a few numbers per run instead of one entry per
// generation for every manifest write to copy and encode. Batches in the
// older form (retired_batches) are still read and forgotten.

// retireBatchWindow groups retirements this close in time under one
// timestamp, the earliest.
const retireBatchWindow = int64(time.Second)

// retire adds gens to the retired list, stamped now.
func retire(m *storagepb.Manifest, gens []*storagepb.Generation, now int64) {
	var b *storagepb.RetiredRuns
	if n := len(m.RetiredRuns); n > 0 && now-m.RetiredRuns[n-1].GetRetiredUnixNanos() < retireBatchWindow {
		b = m.RetiredRuns[n-1]
	} else {
		b = &storagepb.RetiredRuns{RetiredUnixNanos: now}
		m.RetiredRuns = append(m.RetiredRuns, b)
	}
	for _, g := range gens {
		k := format.KeyOf(g)
		addRun(b, k.Epoch, k.Number, 1)
	}
}

// addRun appends count generations from first to b, extending its last run
// when they follow it.
func addRun(b *storagepb.RetiredRuns, epoch, first, count uint64) {
	if n := len(b.Firsts); n > 0 && b.Epochs[n-1] == epoch && b.Firsts[n-1]+b.Counts[n-1] == first {
		b.Counts[n-1] += count
		return
	}
	b.Epochs = append(b.Epochs, epoch)
	b.Firsts = append(b.Firsts, first)
	b.Counts = append(b.Counts, count)
}

// eachRetired calls f for every retired generation with the time it was
// retired, older batches first, each list in time order, until f returns
// false.
func eachRetired(m *storagepb.Manifest, f func(k format.GenKey, retired int64) bool) {
	for _, b := range m.GetRetiredBatches() {
		for i, num := range b.GetNumbers() {
			if !f(format.GenKey{Epoch: b.GetEpochs()[i], Number: num}, b.GetRetiredUnixNanos()) {
				return
			}
		}
	}
	for _, b := range m.GetRetiredRuns() {
		for i, first := range b.GetFirsts() {
			for k := range b.GetCounts()[i] {
				if !f(format.GenKey{Epoch: b.GetEpochs()[i], Number: first + k}, b.GetRetiredUnixNanos()) {
					return
				}
			}
		}
	}
}

// dueRetired returns up to limit retired generations whose grace period has
// passed by now, and how many are due in all. A batch's time is that of its
// first retirement and later ones join it for up to retireBatchWindow, so a
// batch is due only that much after its grace, and no generation is
// deleted before its own grace has passed.
func dueRetired(m *storagepb.Manifest, now, grace int64, limit int) (due []format.GenKey, backlog int) {
	grace += retireBatchWindow
	for _, b := range m.GetRetiredBatches() {
		if now-b.GetRetiredUnixNanos() < grace {
			break // in time order
		}
		for i, num := range b.GetNumbers() {
			backlog++
			if len(due) < limit {
				due = append(due, format.GenKey{Epoch: b.GetEpochs()[i], Number: num})
			}
		}
	}
	for _, b := range m.GetRetiredRuns() {
		if now-b.GetRetiredUnixNanos() < grace {
			break // in time order
		}
		for i, first := range b.GetFirsts() {
			count := b.GetCounts()[i]
			backlog += int(count)
			for k := uint64(0); k < count && len(due) < limit; k++ {
				due = append(due, format.GenKey{Epoch: b.GetEpochs()[i], Number: first + k})
			}
		}
	}
	return due, backlog
}

// forget removes the generations GC deleted from m's retired list.
func forget(m *storagepb.Manifest, gone map[format.GenKey]bool) {
	batches := m.RetiredBatches[:0:0]
	for _, b := range m.GetRetiredBatches() {
		var epochs, numbers []uint64
		for i, num := range b.GetNumbers() {
			if !gone[format.GenKey{Epoch: b.GetEpochs()[i], Number: num}] {
				epochs, numbers = append(epochs, b.GetEpochs()[i]), append(numbers, num)
			}
		}
		if len(numbers) > 0 {
			batches = append(batches, &storagepb.RetiredBatch{RetiredUnixNanos: b.GetRetiredUnixNanos(), Epochs: epochs, Numbers: numbers})
		}
	}
	m.RetiredBatches = batches
	runs := m.RetiredRuns[:0:0]
	for _, b := range m.GetRetiredRuns() {
		nb := &storagepb.RetiredRuns{RetiredUnixNanos: b.GetRetiredUnixNanos()}
		for i, first := range b.GetFirsts() {
			epoch, count := b.GetEpochs()[i], b.GetCounts()[i]
			start := first // the first number of the kept stretch
			for num := first; num < first+count; num++ {
				if gone[format.GenKey{Epoch: epoch, Number: num}] {
					if num > start {
						addRun(nb, epoch, start, num-start)
					}
					start = num + 1
				}
			}
			if first+count > start {
				addRun(nb, epoch, start, first+count-start)
			}
		}
		if len(nb.Firsts) > 0 {
			runs = append(runs, nb)
		}
	}
	m.RetiredRuns = runs
}

// retiredCount is the number of generations awaiting deletion.
func retiredCount(m *storagepb.Manifest) int {
	n := 0
	for _, b := range m.GetRetiredBatches() {
		n += len(b.GetNumbers())
	}
	for _, b := range m.GetRetiredRuns() {
		for _, c := range b.GetCounts() {
			n += int(c)
		}
	}
	return n
}
