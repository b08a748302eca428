package shard

import (
	"unsafe"

	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// ownBatches is what a resident writer remembers of the log batches it
// committed itself and that its view still lists: their records by id. An
// append's ids are answered from it, under mu, without the Bloom filter
// tests and cache look-ups that every generation of the view costs
// otherwise (LookupCommitted); only the generations the writer did not
// commit itself (inherited batches, merged and v1 generations) are read
// through their filters.
//
// It is exact because it follows the view: a batch joins when its create
// landed (landBatch), and leaves in the same critical section that makes a
// checkpoint without it the view (landLocked), after a merge folded it. A
// new writer, after a reopen, a fence or a delete, starts empty. It is
// bounded: it holds at most maxIDs ids, and a batch that would not fit is
// not remembered, and is looked up through its filter like an inherited one.
// The footer entries it points at are the batch's own, which the cache's
// index of the batch shares while the cache keeps it, and no longer: they
// are charged in full (ownEntryBytes), with a map slot per id, to the
// process's PresenceBudget through acct. A batch the budget refuses is not
// remembered; when the budget drops the writer's state (shed), it starts
// empty again.
type ownBatches struct {
	maxIDs  int
	byID    map[string]ownRecord
	batches map[uint64]ownBatch // by log position
	bytes   int64               // what ownEntryBytes and ownBatchBytes charge for them
	acct    *presenceAccount    // the writer's share of the budget; nil: none
	// peak is the most ids byID held since its table was last made:
	// a Go map never shrinks, so its table is sized for peak, not for
	// what the budget charges now (see compact).
	peak int
}

// ownRecord is a record of a remembered batch.
type ownRecord struct {
	entry    *storagepb.FooterEntry
	position uint64
}

// ownBatch is a remembered batch: its descriptor in the view, and its
// records, to forget them by.
type ownBatch struct {
	gen     *storagepb.Generation
	entries []*storagepb.FooterEntry
}

// maxOwnIDs bounds the ids a writer remembers: 8,192, about 1.7 MiB with
// 18-byte ids (batchBytes, TestPresenceChargeIsTheHeapItHolds), so that
// one busy writer cannot take a whole PresenceBudget. A lone client's
// batches, which merges fold about 2K at a time, stay far below it; 64
// clients on one shard reach a few thousand.
const maxOwnIDs = 8192

func newOwnBatches(maxIDs int) ownBatches {
	return ownBatches{maxIDs: maxIDs}
}

// add remembers e, a batch this writer created, if it fits, under the
// writer's cap and the process's budget. The caller holds mu.
func (o *ownBatches) add(e *shardlog.Entry, entries []*storagepb.FooterEntry) {
	if e.Gen == nil || len(o.byID)+len(entries) > o.maxIDs {
		return
	}
	n := batchBytes(entries)
	if !o.acct.grow(n) {
		return
	}
	if o.byID == nil {
		o.byID, o.batches = map[string]ownRecord{}, map[uint64]ownBatch{}
	}
	o.bytes += n
	o.batches[e.Position] = ownBatch{gen: e.Gen, entries: entries}
	for _, fe := range entries {
		o.byID[fe.GetId()] = ownRecord{entry: fe, position: e.Position}
	}
	o.peak = max(o.peak, len(o.byID))
}

// holds reports whether g, a generation of the view, is a remembered
// batch, whose ids lookup answers. The caller holds mu.
func (o *ownBatches) holds(g *storagepb.Generation) bool {
	p := g.GetPosition()
	if p == 0 || len(o.batches) == 0 {
		return false
	}
	b, ok := o.batches[p]
	return ok && b.gen.GetPutId() == g.GetPutId()
}

// lookup adds the ids of the remembered batches among ids to present. The
// caller holds mu.
func (o *ownBatches) lookup(entries []Entry, present map[string]shardlog.Found) {
	o.acct.touch()
	if len(o.byID) == 0 {
		return
	}
	for _, e := range entries {
		if r, ok := o.byID[e.ID]; ok {
			present[e.ID] = shardlog.Found{Entry: r.entry, Gen: o.batches[r.position].gen}
		}
	}
}

// retain forgets the remembered batches that view no longer lists: a
// merge folded them into a generation that the filters answer for. The
// caller holds mu.
func (o *ownBatches) retain(view *storagepb.Manifest) {
	if len(o.batches) == 0 {
		return
	}
	live := make(map[uint64]bool, len(o.batches))
	for _, g := range view.GetGenerations() {
		if o.holds(g) {
			live[g.GetPosition()] = true
		}
	}
	for p, b := range o.batches {
		if live[p] {
			continue
		}
		for _, fe := range b.entries {
			if r, ok := o.byID[fe.GetId()]; ok && r.position == p {
				delete(o.byID, fe.GetId())
			}
		}
		delete(o.batches, p)
		o.bytes -= batchBytes(b.entries)
	}
	o.compact()
}

// compact remakes the maps at their size once they hold under half of
// their peak, so that the room a checkpoint freed is given back to the heap
// as it is to the budget: the tables the budget does not charge stay
// within what it does. Copying half a peak's ids when at least as many
// were forgotten keeps it linear in the forgetting. The caller holds mu.
func (o *ownBatches) compact() {
	switch n := len(o.byID); {
	case n == 0 && len(o.batches) == 0:
		o.byID, o.batches, o.peak = nil, nil, 0
	case n < o.peak/2:
		byID := make(map[string]ownRecord, n)
		for id, r := range o.byID {
			byID[id] = r
		}
		batches := make(map[uint64]ownBatch, len(o.batches))
		for p, b := range o.batches {
			batches[p] = b
		}
		o.byID, o.batches, o.peak = byID, batches, n
	}
}

// forget drops every remembered batch, and the maps' room with them: the
// budget took the writer's state back (shed), or the writer stopped. The
// caller holds mu.
func (o *ownBatches) forget() {
	o.byID, o.batches, o.bytes, o.peak = nil, nil, 0, 0
}

// The estimated bytes a remembered batch keeps reachable, for the budget.
// A Go map's table holds each slot (key, value and a control byte) at a
// load between 7/16, just after it doubled, and 7/8: the estimate takes
// the emptier end, 16/7 slots per entry.
var (
	// ownEntryBytes is what one id adds: its footer entry, rounded to
	// the allocator's size class, the entries slice's pointer to it, and
	// its slot in byID. Its id's bytes, rounded to 8, are added per id:
	// the map's key shares them with the entry.
	ownEntryBytes = int64(footerEntrySize + 8 + mapSlotBytes(unsafe.Sizeof("")+unsafe.Sizeof(ownRecord{})))
	// ownBatchBytes is what a batch adds: its slot in batches. Its
	// descriptor is the view's, which lists it either way.
	ownBatchBytes = int64(mapSlotBytes(unsafe.Sizeof(uint64(0)) + unsafe.Sizeof(ownBatch{})))
)

// footerEntrySize is a storagepb.FooterEntry's size, rounded up to the
// allocator's size class (16 bytes apart up to 256).
const footerEntrySize = (unsafe.Sizeof(storagepb.FooterEntry{}) + 15) &^ 15

func mapSlotBytes(kv uintptr) uintptr { return (kv + 1) * 16 / 7 }

// batchBytes is what remembering a batch of entries is charged.
func batchBytes(entries []*storagepb.FooterEntry) int64 {
	n := ownBatchBytes + int64(len(entries))*ownEntryBytes
	for _, fe := range entries {
		n += int64(len(fe.GetId())+7) &^ 7
	}
	return n
}
