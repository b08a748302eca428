package model

import "unsafe"

// Array capacities. A Config chooses bounds at or below them. Every field of
// State is a byte-sized value or an array of them, so State is comparable and
// copies by value: a successor is a copy with one step applied.
const (
	maxPos     = 6 // log positions 1..maxPos
	maxWriters = 3
	maxIDs     = 3
	maxReqs    = 6
	noID       = 0xff
)

type blobKind uint8

const (
	empty blobKind = iota
	batchBlob
	fenceBlob
)

// blob is the content of one log position. Two creates carry identical bytes
// exactly when their blobs are equal: a retry of a frozen batch reuses writer
// and put, so it compares equal to the first attempt.
type blob struct {
	kind   blobKind
	epoch  uint8
	writer uint8 // the writer incarnation that built it
	put    uint8 // put id, unique within the writer
	id     uint8 // the record's id (batches only; one record per batch)
	seq    uint8 // batches: the record's seq; fences: the next seq
}

// nextSeqAfter is the seq a writer assigns after reading b at its tail.
func nextSeqAfter(b blob) uint8 {
	switch b.kind {
	case batchBlob:
		return b.seq + 1
	case fenceBlob:
		return b.seq
	}
	return 1
}

// entry is the manifest's record of one checkpointed position. A merged
// batch lives in a merged generation outside the log (the manifest lists it
// and readers take the record from it); an unmerged one is read from the log.
type entry struct {
	blob   blob
	merged bool
}

// manifest is the checkpoint: it covers positions 1..ckpt. version plays the
// ETag: every successful CAS increments it.
type manifest struct {
	version uint8
	epoch   uint8
	owner   int8 // writer incarnation holding epoch; -1 before the first claim
	ckpt    uint8
	entries [maxPos + 1]entry
}

func (m *manifest) nextSeq() uint8 {
	if m.ckpt == 0 {
		return 1
	}
	return nextSeqAfter(m.entries[m.ckpt].blob)
}

func (m *manifest) hasUnmerged() bool {
	for p := 1; p <= int(m.ckpt); p++ {
		if e := m.entries[p]; e.blob.kind == batchBlob && !e.merged {
			return true
		}
	}
	return false
}

// request is a create-only PUT that has been sent. It stays in flight after its
// sender stopped waiting (lost response, timeout, abort), so it can land at any
// later step: that is how the model delays requests.
type request struct {
	pos     uint8
	content blob
	awaited bool // the sender still waits for the answer
	landed  bool
	created bool // the answer, once landed
}

type phase uint8

const (
	idle       phase = iota // not opened yet
	probing                 // claimed; probing forward from the claim's checkpoint
	fencing                 // a fence create outstanding or being read back
	confirming              // fence placed; the confirm CAS is next
	ready                   // may append, checkpoint, merge
	committing              // a batch create outstanding or being read back
	ended                   // aborted, closed or fenced
)

// doubt says how the writer's current create stands after its answer.
type doubt uint8

const (
	answered     doubt = iota
	afterExists        // "exists": must read the position back
	afterUnknown       // outcome unknown: must read the position back
)

type writer struct {
	phase     phase
	epoch     uint8
	version   uint8 // the manifest version this writer's next CAS expects
	ckpt      uint8 // the checkpoint this writer knows is durable
	tail      uint8 // the last position it knows is filled
	nextSeq   uint8
	known     uint8 // bitmask of ids it knows are stored (id lookups)
	skipFence bool
	cur       blob  // the frozen content of the current create
	pos       uint8 // its position
	waiting   bool  // a request for cur is awaited
	doubt     doubt
	nextPut   uint8
	held      uint8 // bitmask of ids whose appends wait at the lag bound
}

// inDoubt reports a create whose outcome this writer has not settled. Abort
// hands it to the process (the writer set) so the next open fences.
func (w *writer) inDoubt() bool { return w.waiting || w.doubt != answered }

type rec struct{ pos, id, seq uint8 }

type readerPhase uint8

const (
	rIdle readerPhase = iota
	rProbe
	rConfirm
)

type reader struct {
	phase        readerPhase
	probe        uint8 // the next position to probe
	base         uint8 // the checkpoint of the manifest its records come from
	ackedAtStart uint8 // ghost: ids acked before this read began
	n            uint8
	res          [maxPos]rec
	reads        uint8 // completed reads
}

type gc struct {
	next     uint8 // lowest position GC has not passed
	deleting uint8 // position of the delete in flight, 0 for none
}

// process is the writer set of one process: what its last writer of the shard
// left behind decides whether the next open may skip the fence.
//
// The rule asks for every create answered. The model found that this
// is not enough: a previous writer that ended before its confirm (after its
// claim CAS, before or while fencing) answered every create yet never fenced
// out the writer before it, so that one can still commit at the position the
// reopen writes. Skipping the fence therefore also needs a confirmed claim.
type process struct {
	last      int8 // writer incarnation, -1 for none
	answered  bool // it ended with every create answered
	confirmed bool // its claim was confirmed: its fence (or its own skip) held
}

// State is one global state. Ghost fields (hist, acked, seenIDs,
// r.ackedAtStart) are observations for the invariants; no actor reads them.
type State struct {
	log     [maxPos + 1]blob
	hist    [maxPos + 1]blob // ghost: the first content ever created at each position
	man     manifest
	reqs    [maxReqs]request
	nreq    uint8
	w       [maxWriters]writer
	procs   [2]process
	r       reader
	gc      gc
	acked   uint8 // ghost: ids acknowledged so far
	seenIDs uint8 // ghost: ids returned by completed reads
	faults  uint8 // lost or delayed answers used so far
}

// writerProc fixes the incarnations: w0 and w2 are the same process (w2
// reopens the shard after w0 ended); w1 is another process taking over.
var writerProc = [maxWriters]uint8{0, 1, 0}

func initial(cfg Config) State {
	var s State
	s.man.owner = -1
	for i := range s.procs {
		s.procs[i].last = -1
	}
	s.gc.next = 1
	return s
}

// normalize puts a state in canonical form, so that states differing only in
// the order of in-flight requests or in dead slots hash alike.
func (s *State) normalize() {
	// Insertion sort: at most maxReqs entries.
	for i := 1; i < int(s.nreq); i++ {
		for j := i; j > 0 && lessReq(s.reqs[j], s.reqs[j-1]); j-- {
			s.reqs[j], s.reqs[j-1] = s.reqs[j-1], s.reqs[j]
		}
	}
	for i := int(s.nreq); i < maxReqs; i++ {
		s.reqs[i] = request{}
	}
	for i := int(s.r.n); i < maxPos; i++ {
		s.r.res[i] = rec{}
	}
	// Only whether a writer's expected version equals the manifest's matters
	// (versions only grow), so versions are renamed to 2 (current) and 1
	// (stale).
	cur := s.man.version
	if s.man.owner >= 0 {
		s.man.version = 2
	}
	for i := range s.w {
		w := &s.w[i]
		if w.phase != idle {
			if w.version == cur {
				w.version = 2
			} else {
				w.version = 1
			}
		}
		if w.phase == ended {
			// An ended writer's remaining fields are never read again
			// (held only by the wedge check, and only under a mutation).
			*w = writer{phase: ended, held: w.held}
		}
	}
}

func lessReq(a, b request) bool {
	if a.pos != b.pos {
		return a.pos < b.pos
	}
	if a.content.writer != b.content.writer {
		return a.content.writer < b.content.writer
	}
	if a.content.put != b.content.put {
		return a.content.put < b.content.put
	}
	if a.awaited != b.awaited {
		return !a.awaited
	}
	if a.landed != b.landed {
		return !a.landed
	}
	return !a.created && b.created
}

// bytes views s as its memory, for hashing without a copy. Every field of
// State is a byte-sized value (TestStateHasNoPadding checks), so equal states
// have equal bytes once normalized.
func (s *State) bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(s)), unsafe.Sizeof(*s))
}
