package model

// Each action is one atomic step of one actor against the store. Reads and
// manifest CASes are atomic steps (the store is linearizable and a read's
// answer is the state at some instant between send and answer). Creates and
// GC deletes are split into send and land, so that a request can land at any
// later step, after its sender timed out, aborted or was fenced.

type actKind uint8

const (
	actClaim       actKind = iota // writer: CAS the manifest to epoch+1
	actProbe                      // writer: read tail+1; fence at the first free position
	actAppend                     // writer: freeze a batch for id arg at tail+1 and send it
	actLand                       // store: request arg lands (create-only)
	actRespond                    // network: request arg's answer reaches its sender
	actTimeout                    // fault: request arg's answer is lost or late: outcome unknown
	actReadBack                   // writer: read its position after "exists" or "unknown"
	actConfirm                    // writer: confirm CAS that checkpoints through the fence
	actCheckpoint                 // writer (owner): checkpoint CAS through its tail
	actMerge                      // writer (owner): merge checkpointed positions into a merged generation
	actAbort                      // writer: Abort/evict/Close timeout, no I/O
	actReadStart                  // reader: read the manifest and the generations it lists
	actReadProbe                  // reader: probe the next position
	actReadConfirm                // reader: confirming manifest read after a missing probe
	actGCSend                     // GC: send the delete of the next collectable position
	actGCLand                     // store: GC's delete lands
	numActKinds
)

type action struct {
	kind  actKind
	actor uint8 // writer index for writer actions
	arg   uint8 // id for actAppend, request index for request actions
}

// enabled lists the candidate actions of s in a fixed order; apply may still
// find one of them a no-op. The order is part of a trace's encoding.
func enabled(s *State, cfg *Config, out []action) []action {
	for i := range s.w {
		if !cfg.Writers.has(i) {
			continue
		}
		w := &s.w[i]
		a := func(k actKind, arg uint8) { out = append(out, action{k, uint8(i), arg}) }
		switch w.phase {
		case idle:
			if i != 2 || !cfg.Writers.has(0) || s.w[0].phase == ended {
				a(actClaim, 0)
			}
		case probing:
			a(actProbe, 0)
		case confirming:
			a(actConfirm, 0)
		case ready:
			room := int(w.tail) < cfg.Positions && int(w.tail) < int(w.ckpt)+2*cfg.LagK
			for x := 0; x < cfg.IDs; x++ {
				known := w.known&(1<<x) != 0
				if (known && s.acked&(1<<x) == 0) || (!known && room) {
					a(actAppend, uint8(x))
				}
			}
		}
		if (w.phase == fencing || w.phase == committing) && !w.waiting && w.doubt != answered {
			a(actReadBack, 0)
		}
		if w.phase == ready || w.phase == committing {
			// The owner's background work; a stale owner's CAS fails and ends it.
			stale := w.version != s.man.version
			if w.tail > w.ckpt || stale {
				a(actCheckpoint, 0)
			}
			if stale || s.man.hasUnmerged() || (cfg.Mutation&MergeBeyondCheckpoint != 0 && w.tail > s.man.ckpt) {
				a(actMerge, 0)
			}
		}
		if w.phase != idle && w.phase != ended {
			a(actAbort, 0)
		}
	}
	for j := 0; j < int(s.nreq); j++ {
		r := &s.reqs[j]
		if !r.landed {
			out = append(out, action{actLand, 0, uint8(j)})
		}
		if r.landed && r.awaited {
			out = append(out, action{actRespond, 0, uint8(j)})
		}
		if r.awaited && int(s.faults) < cfg.Faults {
			out = append(out, action{actTimeout, 0, uint8(j)})
		}
	}
	switch s.r.phase {
	case rIdle:
		if int(s.r.reads) < cfg.Reads {
			out = append(out, action{kind: actReadStart})
		}
	case rProbe:
		out = append(out, action{kind: actReadProbe})
	case rConfirm:
		out = append(out, action{kind: actReadConfirm})
	}
	if s.gc.deleting != 0 {
		out = append(out, action{kind: actGCLand})
	} else if _, ok := s.gcNext(cfg.Mutation&CollectFences != 0); ok {
		out = append(out, action{kind: actGCSend})
	}
	return out
}

// apply performs a on s. It returns false if a changes nothing or is blocked
// by a bound; the explorer then drops it.
func apply(s *State, a action, c *ctx) bool {
	i := int(a.actor)
	switch a.kind {
	case actClaim:
		return s.claim(i, c)
	case actProbe:
		return s.probe(i, c)
	case actAppend:
		return s.appendID(i, a.arg, c)
	case actLand:
		return s.land(int(a.arg), c)
	case actRespond:
		return s.respond(int(a.arg), c)
	case actTimeout:
		return s.timeout(int(a.arg), c)
	case actReadBack:
		return s.readBack(i, c)
	case actConfirm:
		return s.confirm(i, c)
	case actCheckpoint:
		return s.checkpoint(i, c)
	case actMerge:
		return s.merge(i, c)
	case actAbort:
		c.note("w%d aborts%s", i, doubtNote(&s.w[i]))
		s.end(i, c)
		return true
	case actReadStart:
		return s.readStart(c)
	case actReadProbe:
		return s.readProbe(c)
	case actReadConfirm:
		return s.readConfirm(c)
	case actGCSend:
		return s.gcSend(c)
	case actGCLand:
		c.note("GC's delete of position %d lands (held %v)", s.gc.deleting, s.log[s.gc.deleting])
		s.log[s.gc.deleting] = blob{}
		s.gc.deleting = 0
		c.cover(covGCDelete)
		return true
	}
	panic("model: unknown action")
}

func doubtNote(w *writer) string {
	if w.inDoubt() {
		return " with a create in doubt"
	}
	return ""
}

// claim is the epoch claim: one CAS on the manifest, collapsed with the read
// it is conditioned on (a lost CAS only rereads and retries).
func (s *State) claim(i int, c *ctx) bool {
	w, m := &s.w[i], &s.man
	p := &s.procs[writerProc[i]]
	prev := m.owner
	// Fences count takeovers, not opens: skip only when this process's
	// previous writer owned the manifest, had its claim confirmed and left
	// no create in doubt (see process).
	w.skipFence = prev >= 0 && prev == p.last &&
		(p.answered || c.has(SkipFenceInDoubt)) && (p.confirmed || c.has(SkipFenceUnconfirmed))
	m.epoch++
	m.owner = int8(i)
	m.version++
	w.epoch, w.version = m.epoch, m.version
	w.ckpt, w.tail = m.ckpt, m.ckpt
	w.nextSeq = m.nextSeq()
	for pos := 1; pos <= int(m.ckpt); pos++ {
		if b := m.entries[pos].blob; b.kind == batchBlob {
			w.known |= 1 << b.id
		}
	}
	w.phase = probing
	c.note("w%d claims epoch %d (checkpoint %d, skip fence: %v)", i, w.epoch, w.ckpt, w.skipFence)
	if w.skipFence {
		c.cover(covSkipFence)
	}
	return true
}

func (s *State) at(pos uint8) blob {
	if int(pos) >= len(s.log) {
		return blob{}
	}
	return s.log[pos]
}

// learn records content found at the writer's next position.
func (w *writer) learn(pos uint8, b blob) {
	w.tail = pos
	w.nextSeq = nextSeqAfter(b)
	if b.kind == batchBlob {
		w.known |= 1 << b.id
	}
}

// learnTail learns a blob another writer left above the claim's checkpoint:
// the inherited tail, which id lookups must cover.
func (s *State) learnTail(i int, pos uint8, b blob, c *ctx) {
	w := &s.w[i]
	known := w.known
	w.learn(pos, b)
	if c.has(ForgetTailIDs) {
		w.known = known
	}
}

func (s *State) probe(i int, c *ctx) bool {
	w := &s.w[i]
	pos := w.tail + 1
	b := s.at(pos)
	if b.kind != empty {
		c.note("w%d probes %d: %v", i, pos, b)
		if b.epoch > w.epoch {
			c.note("w%d is fenced", i)
			s.end(i, c)
			return true
		}
		s.learnTail(i, pos, b, c)
		return true
	}
	if w.skipFence {
		c.note("w%d probes %d: missing; tail %d, no fence", i, pos, w.tail)
		w.pos = w.tail
		w.phase = confirming
		return true
	}
	if int(pos) > c.cfg.Positions {
		return false
	}
	c.note("w%d probes %d: missing; sends fence create at %d", i, pos, pos)
	w.phase = fencing
	return s.send(i, pos, blob{kind: fenceBlob, epoch: w.epoch, writer: uint8(i), put: w.nextPut, seq: w.nextSeq})
}

// send freezes b at pos as the writer's current create and puts it in flight.
func (s *State) send(i int, pos uint8, b blob) bool {
	if s.nreq == maxReqs {
		return false
	}
	w := &s.w[i]
	if b != w.cur || pos != w.pos {
		w.nextPut++
	}
	w.cur, w.pos = b, pos
	w.waiting, w.doubt = true, answered
	s.reqs[s.nreq] = request{pos: pos, content: b, awaited: true}
	s.nreq++
	return true
}

func (s *State) appendID(i int, x uint8, c *ctx) bool {
	w := &s.w[i]
	if w.known&(1<<x) != 0 {
		// An id lookup finds it: a retry is answered without a write.
		if s.acked&(1<<x) != 0 {
			return false
		}
		c.note("w%d appends id %s: found stored, acks without a write", i, idName(x))
		c.checkKnownAck(s, i, x)
		s.acked |= 1 << x
		c.cover(covDedupAck)
		return true
	}
	pos := w.tail + 1
	// Creates stop at checkpoint+2K until a checkpoint lands.
	if int(pos) > c.cfg.Positions || int(pos) > int(w.ckpt)+2*c.cfg.LagK {
		return false
	}
	b := blob{kind: batchBlob, epoch: w.epoch, writer: uint8(i), put: w.nextPut, id: x, seq: w.nextSeq}
	c.note("w%d appends id %s: sends %v create at %d", i, idName(x), b, pos)
	w.phase = committing
	return s.send(i, pos, b)
}

func (s *State) removeReq(j int) {
	copy(s.reqs[j:], s.reqs[j+1:s.nreq])
	s.nreq--
	s.reqs[s.nreq] = request{}
}

func (s *State) land(j int, c *ctx) bool {
	r := &s.reqs[j]
	sender := "its sender waits"
	if !r.awaited {
		sender = "nobody waits"
	}
	if s.log[r.pos].kind == empty {
		s.log[r.pos] = r.content
		r.created = true
		c.note("create of %v at %d lands: created (%s)", r.content, r.pos, sender)
		c.checkLand(s, r.pos, r.content)
		if s.w[r.content.writer].phase == ended {
			c.cover(covLateLanding)
		}
	} else {
		c.note("create of %v at %d lands: exists (%s)", r.content, r.pos, sender)
	}
	r.landed = true
	if !r.awaited {
		s.removeReq(j)
	}
	return true
}

func (s *State) respond(j int, c *ctx) bool {
	r := s.reqs[j]
	s.removeReq(j)
	i := int(r.content.writer)
	w := &s.w[i]
	w.waiting = false
	if r.created {
		c.note("w%d hears: created at %d", i, r.pos)
		s.landed(i, c)
		return true
	}
	c.note("w%d hears: exists at %d", i, r.pos)
	w.doubt = afterExists
	return true
}

func (s *State) timeout(j int, c *ctx) bool {
	r := &s.reqs[j]
	i := int(r.content.writer)
	w := &s.w[i]
	s.faults++
	w.waiting = false
	w.doubt = afterUnknown
	r.awaited = false
	if r.landed {
		c.note("w%d: the answer to its create at %d is lost (it landed)", i, r.pos)
		s.removeReq(j)
	} else {
		c.note("w%d: its create at %d times out (still in flight)", i, r.pos)
	}
	return true
}

// landed handles the writer's own content found at its position.
func (s *State) landed(i int, c *ctx) {
	w := &s.w[i]
	w.waiting, w.doubt = false, answered
	w.learn(w.pos, w.cur)
	switch w.phase {
	case fencing:
		w.phase = confirming
	case committing:
		c.note("w%d acks id %s at %d", i, idName(w.cur.id), w.pos)
		c.checkAck(s, i, w.pos, w.cur)
		s.acked |= 1 << w.cur.id
		w.phase = ready
	}
}

// readBack decides an "exists" or unknown outcome by reading the position.
func (s *State) readBack(i int, c *ctx) bool {
	w := &s.w[i]
	b := s.log[w.pos]
	c.note("w%d reads back %d: %v", i, w.pos, b)
	switch {
	case b == w.cur:
		s.landed(i, c)
		return true
	case b.kind == empty:
		// Identical bytes, same put id: a frozen batch is never rebuilt.
		w.doubt = answered
		return s.send(i, w.pos, w.cur)
	case b.epoch > w.epoch:
		c.note("w%d is fenced", i)
		w.doubt = answered
		s.end(i, c)
		return true
	}
	// A lower epoch's blob: a late landing, part of the log. Move past it.
	c.cover(covMovePast)
	w.doubt = answered
	s.learnTail(i, w.pos, b, c)
	pos := w.tail + 1
	if int(pos) > c.cfg.Positions {
		return false
	}
	if w.phase == fencing {
		return s.send(i, pos, blob{kind: fenceBlob, epoch: w.epoch, writer: uint8(i), put: w.nextPut, seq: w.nextSeq})
	}
	if w.known&(1<<w.cur.id) != 0 {
		c.note("w%d acks id %s: the late landing stored it", i, idName(w.cur.id))
		c.checkKnownAck(s, i, w.cur.id)
		s.acked |= 1 << w.cur.id
		w.phase = ready
		return true
	}
	// Only reachable when the fence invariant is broken: the batch moves on.
	b = blob{kind: batchBlob, epoch: w.epoch, writer: uint8(i), put: w.nextPut, id: w.cur.id, seq: w.nextSeq}
	return s.send(i, pos, b)
}

// checkpointThrough is the body of every owner CAS that advances the
// checkpoint: the positions this writer knows are listed as unmerged entries.
func (s *State) checkpointThrough(i int, t uint8) {
	w, m := &s.w[i], &s.man
	// The writer lists what it read or wrote at (ckpt, t]. The model takes it
	// from the log: while this CAS can succeed no newer writer has claimed,
	// so nothing above this writer's checkpoint was collected, and a
	// position's content never changes until it is collected.
	for p := w.ckpt + 1; p <= t; p++ {
		m.entries[p] = entry{blob: s.log[p]}
	}
	m.ckpt = t
	m.version++
	w.version = m.version
	w.ckpt = t
}

func (s *State) confirm(i int, c *ctx) bool {
	w, m := &s.w[i], &s.man
	f := w.pos
	beyond := f > m.ckpt || (w.skipFence && f == m.ckpt)
	if m.version != w.version || m.epoch != w.epoch || !beyond {
		c.note("w%d's confirm CAS fails: manifest epoch %d", i, m.epoch)
		s.end(i, c)
		return true
	}
	c.note("w%d confirms: checkpoint through %d", i, f)
	s.checkpointThrough(i, f)
	w.phase = ready
	return true
}

func (s *State) checkpoint(i int, c *ctx) bool {
	w, m := &s.w[i], &s.man
	if w.tail <= w.ckpt {
		return false
	}
	if m.version != w.version {
		c.note("w%d's checkpoint CAS fails: manifest epoch %d", i, m.epoch)
		s.end(i, c)
		return true
	}
	c.note("w%d checkpoints through %d", i, w.tail)
	s.checkpointThrough(i, w.tail)
	return true
}

func (s *State) merge(i int, c *ctx) bool {
	w, m := &s.w[i], &s.man
	if m.version != w.version {
		c.note("w%d's merge CAS fails: manifest epoch %d", i, m.epoch)
		s.end(i, c)
		return true
	}
	merged := false
	for p := 1; p <= int(m.ckpt); p++ {
		if e := &m.entries[p]; e.blob.kind == batchBlob && !e.merged {
			e.merged = true
			merged = true
		}
	}
	if c.has(MergeBeyondCheckpoint) {
		// The merged generation takes in positions the checkpoint does not
		// cover yet.
		for p := m.ckpt + 1; p <= w.tail; p++ {
			if b := s.log[p]; b.kind == batchBlob {
				m.entries[p] = entry{blob: b, merged: true}
				merged = true
			}
		}
	}
	if !merged {
		return false
	}
	m.version++
	w.version = m.version
	c.note("w%d merges positions 1..%d into a merged generation", i, m.ckpt)
	return true
}

// end stops a writer with no I/O. Its requests stay in flight; the writer set
// remembers whether any of its creates was left in doubt.
func (s *State) end(i int, c *ctx) {
	w := &s.w[i]
	p := &s.procs[writerProc[i]]
	p.last = int8(i)
	p.answered = !w.inDoubt()
	p.confirmed = w.phase == ready || w.phase == committing
	for j := int(s.nreq) - 1; j >= 0; j-- {
		if r := &s.reqs[j]; int(r.content.writer) == i {
			r.awaited = false
			if r.landed {
				s.removeReq(j)
			}
		}
	}
	w.phase = ended
}

// loadManifest is a read of the manifest and of the generations it lists,
// keeping the records this read probed above the new checkpoint. A listed log
// position is checked against the put id the manifest records: a position
// that is gone, or was collected and created again by a late request, reads
// as NotFound and the read retries.
func (s *State) loadManifest() bool {
	r, m := &s.r, &s.man
	var keep [maxPos]rec
	nk := 0
	for _, x := range r.res[:r.n] {
		if x.pos > m.ckpt {
			keep[nk] = x
			nk++
		}
	}
	r.n = 0
	for p := 1; p < len(m.entries); p++ {
		e := m.entries[p]
		// Merged generations are listed by the manifest whatever positions
		// they hold; the correct protocol never lists one beyond the
		// checkpoint (entries above it are empty).
		if e.blob.kind != batchBlob || (p > int(m.ckpt) && !e.merged) {
			continue
		}
		if !e.merged && s.log[p] != e.blob {
			return false
		}
		r.res[r.n] = rec{uint8(p), e.blob.id, e.blob.seq}
		r.n++
	}
	for _, x := range keep[:nk] {
		r.res[r.n] = x
		r.n++
	}
	r.base = m.ckpt
	if r.probe <= m.ckpt {
		r.probe = m.ckpt + 1
	}
	r.phase = rProbe
	return true
}

func (s *State) readStart(c *ctx) bool {
	s.r.ackedAtStart = s.acked
	s.r.n, s.r.probe = 0, 0
	if !s.loadManifest() {
		return false
	}
	c.note("reader starts: manifest checkpoint %d, %d records; acked so far %s", s.man.ckpt, s.r.n, idSet(s.acked))
	return true
}

func (s *State) readProbe(c *ctx) bool {
	r := &s.r
	b := s.at(r.probe)
	c.note("reader probes %d: %v", r.probe, b)
	switch b.kind {
	case batchBlob:
		if int(r.n) == len(r.res) {
			return false
		}
		r.res[r.n] = rec{r.probe, b.id, b.seq}
		r.n++
		r.probe++
	case fenceBlob:
		r.probe++
	default:
		if c.has(NoConfirmRead) {
			s.readDone(c)
			return true
		}
		r.phase = rConfirm
	}
	return true
}

func (s *State) readConfirm(c *ctx) bool {
	m, r := &s.man, &s.r
	switch {
	case m.ckpt >= r.probe:
		c.note("reader's confirming manifest read: checkpoint %d covers %d; restarts from it", m.ckpt, r.probe)
		c.cover(covReadRestart)
		return s.loadManifest()
	case m.ckpt > r.base && !c.has(TrustCoveredProbes):
		// Positions the read probed at or below the new checkpoint may have
		// been collected and created again by a late request since: take
		// them from the checkpoint instead.
		c.note("reader's confirming manifest read: checkpoint %d covers probed positions; takes them from it; %d is the end", m.ckpt, r.probe)
		c.cover(covReadRebase)
		if !s.loadManifest() {
			return false
		}
	default:
		c.note("reader's confirming manifest read: checkpoint %d; %d is the end", m.ckpt, r.probe)
	}
	s.readDone(c)
	return true
}

func (s *State) readDone(c *ctx) {
	r := &s.r
	c.checkRead(s)
	c.note("reader returns %s", recList(r.res[:r.n]))
	for _, x := range r.res[:r.n] {
		s.seenIDs |= 1 << x.id
	}
	if r.ackedAtStart != 0 {
		c.cover(covReadSawAck)
	}
	*r = reader{reads: r.reads + 1}
}

// gcNext finds the next position GC may delete: in position order, at or
// below the checkpoint, merged, and never a fence (unless collectFences).
func (s *State) gcNext(collectFences bool) (uint8, bool) {
	m := &s.man
	for g := s.gc.next; g <= m.ckpt; g++ {
		e := m.entries[g]
		if e.blob.kind == batchBlob && !e.merged {
			return 0, false // in position order: wait until it is merged
		}
		if e.blob.kind == fenceBlob && !collectFences {
			continue // fences are kept until the shard is deleted
		}
		return g, true
	}
	return 0, false
}

func (s *State) gcSend(c *ctx) bool {
	g, ok := s.gcNext(c.has(CollectFences))
	if !ok {
		return false
	}
	c.note("GC sends the delete of position %d", g)
	s.gc.deleting = g
	s.gc.next = g + 1
	return true
}
