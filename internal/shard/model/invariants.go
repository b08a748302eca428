package model

import (
	"fmt"
	"slices"
)

// Kind names an invariant of the "Proof of correctness".
type Kind int8

const (
	// AckNotVisible: an id acknowledged before a read began is missing from
	// that read.
	AckNotVisible Kind = iota
	// TwoCommits: a position took a second, different content (no two
	// writers commit at one position), or an ack is for content that is not
	// what its position holds.
	TwoCommits
	// FencedAck: a writer acked at or past a position that a higher epoch
	// had already taken.
	FencedAck
	// ScanOrder: a read's records are not seqs 1..n in order, or are not the
	// log's records in position order (Scan skips or repeats).
	ScanOrder
	// DuplicateID: one id is stored at two positions, or a read returns it
	// twice.
	DuplicateID
	// ReadRegression: a read lacks an id that an earlier, completed read
	// returned.
	ReadRegression
	// Wedged: no step is possible, yet a writer never got to run (the
	// writer set did not replace the one before it) or an append still
	// waits at the lag bound of a writer that ended. Checked on states
	// without successors: a deadlock, not a livelock.
	Wedged
	numKinds
)

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return "none"
	}
	return [...]string{
		AckNotVisible:  "ack not visible to a later read",
		TwoCommits:     "two commits at one position",
		FencedAck:      "a fenced writer acked",
		ScanOrder:      "scan skipped, repeated or reordered",
		DuplicateID:    "an id stored twice",
		ReadRegression: "a read lost a record an earlier read returned",
		Wedged:         "a writer or an append waits forever",
	}[k]
}

// Coverage counters show that the exploration reaches the situations the
// invariants are about; a model that never got there would pass vacuously.
type cov uint8

const (
	covLateLanding     cov = iota // a create landed after its sender ended
	covMovePast                   // a writer read a lower epoch's blob and moved past it
	covSkipFence                  // a same-process reopen skipped the fence
	covReadRestart                // a reader restarted from a newer checkpoint
	covReadSawAck                 // a read completed after at least one ack
	covGCDelete                   // GC deleted a position
	covDedupAck                   // a retried id was found stored and acked without a write
	covReadRebase                 // a reader took probed positions from a newer checkpoint
	covRecreated                  // a collected position was created again by a late request
	covLagWait                    // an append waited at the lag bound
	covLagWaitEnded               // a writer ended with appends waiting at the lag bound
	covReplacedInDoubt            // a writer replaced one of its process that ended with a create in doubt
	numCov
)

var covNames = [numCov]string{
	covLateLanding:     "creates landing after their sender ended",
	covMovePast:        "writers moving past a lower epoch's blob",
	covSkipFence:       "reopens skipping the fence",
	covReadRestart:     "reader restarts from a newer checkpoint",
	covReadSawAck:      "reads begun after an ack",
	covGCDelete:        "GC deletes",
	covDedupAck:        "retries answered by an id lookup",
	covReadRebase:      "reads taking probed positions from a newer checkpoint",
	covRecreated:       "collected positions created again by a late request",
	covLagWait:         "appends waiting at the lag bound",
	covLagWaitEnded:    "writers ending with appends waiting at the lag bound",
	covReplacedInDoubt: "replacements of a writer that ended with a create in doubt",
}

type violation struct {
	kind Kind
	msg  string
}

// ctx collects what one transition observed. Messages and notes are formatted
// only when someone will read them: the search applies millions of steps.
type ctx struct {
	cfg     *Config
	tracing bool
	skip    [numKinds]bool // kinds already found; their messages are not needed
	viols   []violation
	notes   []string
	cover_  [numCov]int
}

func (c *ctx) reset() {
	c.viols = c.viols[:0]
	c.notes = c.notes[:0]
}

func (c *ctx) note(format string, args ...any) {
	if c.tracing {
		c.notes = append(c.notes, fmt.Sprintf(format, args...))
	}
}

func (c *ctx) cover(k cov) { c.cover_[k]++ }

func (c *ctx) has(m Mutation) bool { return c.cfg.Mutation&m != 0 }

func (c *ctx) fail(k Kind, format string, args ...any) {
	if c.skip[k] && !c.tracing {
		c.viols = append(c.viols, violation{kind: k})
		return
	}
	c.viols = append(c.viols, violation{k, fmt.Sprintf(format, args...)})
}

// checkLand runs when a create lands on an empty position.
func (c *ctx) checkLand(s *State, pos uint8, b blob) {
	h := s.hist[pos]
	if h.kind == empty {
		s.hist[pos] = b
		if b.kind == batchBlob {
			for q := 1; q < len(s.hist); q++ {
				if q != int(pos) && s.hist[q].kind == batchBlob && s.hist[q].id == b.id {
					c.fail(DuplicateID, "id %s stored at %d and %d", idName(b.id), q, pos)
				}
			}
		}
		return
	}
	// A collected position can be created again by a request that was still
	// in flight: a writer's own earlier attempt (identical bytes), or a fence
	// that lost its race and was answered "unknown". Either leaves an orphan
	// that readers must never trust. A different batch would be a second
	// commit at the position.
	c.cover(covRecreated)
	if h != b && b.kind == batchBlob {
		c.fail(TwoCommits, "position %d, first %v, is created again with %v", pos, h, b)
	}
}

// checkAck runs when writer i acks content b at pos.
func (c *ctx) checkAck(s *State, i int, pos uint8, b blob) {
	if s.hist[pos] != b {
		c.fail(TwoCommits, "w%d acks %v at %d, but the position's commit is %v", i, b, pos, s.hist[pos])
	}
	for q := 1; q <= int(pos); q++ {
		if h := s.hist[q]; h.kind != empty && h.epoch > b.epoch {
			c.fail(FencedAck, "w%d (epoch %d) acks at %d, but epoch %d took %d", i, b.epoch, pos, h.epoch, q)
			return
		}
	}
}

// checkKnownAck runs when writer i acks id x because an id lookup found it.
func (c *ctx) checkKnownAck(s *State, i int, x uint8) {
	for q := 1; q < len(s.hist); q++ {
		if h := s.hist[q]; h.kind == batchBlob && h.id == x {
			return
		}
	}
	c.fail(TwoCommits, "w%d acks id %s as stored, but no position holds it", i, idName(x))
}

// checkRead runs when a read completes.
func (c *ctx) checkRead(s *State) {
	r := &s.r
	got := r.res[:r.n]
	var ids uint8
	for k, x := range got {
		if ids&(1<<x.id) != 0 {
			c.fail(DuplicateID, "read returns id %s twice: %s", idName(x.id), recList(got))
		}
		ids |= 1 << x.id
		if int(x.seq) != k+1 {
			c.fail(ScanOrder, "read returns seqs out of order: %s", recList(got))
			break
		}
	}
	// What the log holds below the position that ended the read.
	var wantBuf [maxPos]rec
	want := wantBuf[:0]
	for p := 1; p < int(r.probe) && p < len(s.hist); p++ {
		if h := s.hist[p]; h.kind == batchBlob {
			want = append(want, rec{uint8(p), h.id, h.seq})
		}
	}
	if !slices.Equal(want, got) {
		c.fail(ScanOrder, "read returns %s, but the log's positions 1..%d hold %s", recList(got), r.probe-1, recList(want))
	}
	if miss := r.ackedAtStart &^ ids; miss != 0 {
		c.fail(AckNotVisible, "read returns %s, missing %s acked before it began", recList(got), idSet(miss))
	}
	if miss := s.seenIDs &^ ids; miss != 0 {
		c.fail(ReadRegression, "read returns %s, missing %s that an earlier read returned", recList(got), idSet(miss))
	}
}

// checkWedged runs on a state with no successor. Every writer can abort at
// any step and an idle one can claim, so in such a state every writer has
// ended, unless the writer set would not replace its predecessor; and an
// ended writer's appends no longer wait for anything.
func (c *ctx) checkWedged(s *State) {
	for i := range s.w {
		if !c.cfg.Writers.has(i) {
			continue
		}
		switch w := &s.w[i]; {
		case w.phase != ended:
			c.fail(Wedged, "nothing can move, and w%d never ran: the writer set kept the writer before it", i)
		case w.held != 0:
			c.fail(Wedged, "nothing can move, and the appends of %s still wait at the lag bound of w%d, which ended", idSet(w.held), i)
		}
	}
}
