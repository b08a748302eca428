package shard

import (
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The retired list is the manifest's record of generations that merges and
// folds replaced and GC has yet to delete. New retirements are kept as runs
// of consecutive generation numbers (Manifest.retired_runs): a lone client's
// commits fold and retire generations in order, so at hundreds of commits a
// second the list stays a few entries instead of thousands that every
// manifest write would copy and encode. Batches in the older form
// (retired_batches) are still read and forgotten.

// retireBatchWindow groups retirements this close in time under one
// timestamp, the earliest.
const retireBatchWindow = int64(time.Second)

// retire adds gens to the retired list, stamped now.
func retire(m *storagepb.Manifest, gens []*storagepb.Generation, now int64) {
	for _, g := range gens {
		if n := len(m.RetiredRuns); n > 0 {
			r := m.RetiredRuns[n-1]
			if r.GetEpoch() == g.GetEpoch() && r.GetFirst()+r.GetCount() == g.GetNumber() && now-r.GetRetiredUnixNanos() < retireBatchWindow {
				r.Count++
				continue
			}
		}
		m.RetiredRuns = append(m.RetiredRuns, &storagepb.RetiredRun{
			RetiredUnixNanos: now, Epoch: g.GetEpoch(), First: g.GetNumber(), Count: 1,
		})
	}
}

// eachRetired calls f for every retired generation with the time it was
// retired, older batches first, each list in time order, until f returns
// false.
func eachRetired(m *storagepb.Manifest, f func(k genKey, retired int64) bool) {
	for _, b := range m.GetRetiredBatches() {
		for i, num := range b.GetNumbers() {
			if !f(genKey{b.GetEpochs()[i], num}, b.GetRetiredUnixNanos()) {
				return
			}
		}
	}
	for _, r := range m.GetRetiredRuns() {
		for k := range r.GetCount() {
			if !f(genKey{r.GetEpoch(), r.GetFirst() + k}, r.GetRetiredUnixNanos()) {
				return
			}
		}
	}
}

// dueRetired returns up to limit retired generations whose grace period has
// passed by now, and how many are due in all.
func dueRetired(m *storagepb.Manifest, now, grace int64, limit int) (due []genKey, backlog int) {
	for _, b := range m.GetRetiredBatches() {
		if now-b.GetRetiredUnixNanos() < grace {
			break // in time order
		}
		for i, num := range b.GetNumbers() {
			backlog++
			if len(due) < limit {
				due = append(due, genKey{b.GetEpochs()[i], num})
			}
		}
	}
	for _, r := range m.GetRetiredRuns() {
		if now-r.GetRetiredUnixNanos() < grace {
			break // in time order
		}
		backlog += int(r.GetCount())
		for k := uint64(0); k < r.GetCount() && len(due) < limit; k++ {
			due = append(due, genKey{r.GetEpoch(), r.GetFirst() + k})
		}
	}
	return due, backlog
}

// forget removes the generations GC deleted from m's retired list.
func forget(m *storagepb.Manifest, gone map[genKey]bool) {
	batches := m.RetiredBatches[:0:0]
	for _, b := range m.GetRetiredBatches() {
		var epochs, numbers []uint64
		for i, num := range b.GetNumbers() {
			if !gone[genKey{b.GetEpochs()[i], num}] {
				epochs, numbers = append(epochs, b.GetEpochs()[i]), append(numbers, num)
			}
		}
		if len(numbers) > 0 {
			batches = append(batches, &storagepb.RetiredBatch{RetiredUnixNanos: b.GetRetiredUnixNanos(), Epochs: epochs, Numbers: numbers})
		}
	}
	m.RetiredBatches = batches
	runs := m.RetiredRuns[:0:0]
	for _, r := range m.GetRetiredRuns() {
		var cur *storagepb.RetiredRun
		for k := range r.GetCount() {
			num := r.GetFirst() + k
			if gone[genKey{r.GetEpoch(), num}] {
				cur = nil
				continue
			}
			if cur == nil {
				cur = &storagepb.RetiredRun{RetiredUnixNanos: r.GetRetiredUnixNanos(), Epoch: r.GetEpoch(), First: num}
				runs = append(runs, cur)
			}
			cur.Count++
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
	for _, r := range m.GetRetiredRuns() {
		n += int(r.GetCount())
	}
	return n
}
