package model

// The writer's steps: claim, probe and fence, confirm, append, read back,
// checkpoint, merge, and its end.

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
	if prev >= 0 && prev == p.last && !p.answered {
		c.cover(covReplacedInDoubt)
	}
	return true
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

func (s *State) appendID(i int, x uint8, c *ctx) bool {
	w := &s.w[i]
	if w.known&(1<<x) != 0 {
		// An id lookup finds it: a retry is answered without a write.
		if s.acked&(1<<x) != 0 {
			return false
		}
		c.note("w%d appends id %s: found stored, acks without a write", i, idName(x))
		w.held &^= 1 << x
		c.checkKnownAck(s, i, x)
		s.acked |= 1 << x
		c.cover(covDedupAck)
		return true
	}
	pos := w.tail + 1
	if int(pos) > c.cfg.Positions {
		return false
	}
	if int(pos) > int(w.ckpt)+2*c.cfg.LagK {
		// Creates stop at checkpoint+2K until a checkpoint lands: the
		// append waits, admitted, until one does or the writer ends.
		if w.held&(1<<x) != 0 {
			return false
		}
		c.note("w%d appends id %s: waits at the lag bound (checkpoint %d, tail %d)", i, idName(x), w.ckpt, w.tail)
		w.held |= 1 << x
		c.cover(covLagWait)
		return true
	}
	w.held &^= 1 << x
	b := blob{kind: batchBlob, epoch: w.epoch, writer: uint8(i), put: w.nextPut, id: x, seq: w.nextSeq}
	c.note("w%d appends id %s: sends %v create at %d", i, idName(x), b, pos)
	w.phase = committing
	return s.send(i, pos, b)
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

// replaceable reports whether the writer set opens a replacement for writer
// i: once it ended, however it ended (fenced, stale, aborted, closed, or
// stopped with a create in doubt), unless KeepInDoubtWriter keeps one that
// ended with a create in doubt.
func (s *State) replaceable(i int, cfg *Config) bool {
	if s.w[i].phase != ended {
		return false
	}
	p := &s.procs[writerProc[i]]
	return cfg.Mutation&KeepInDoubtWriter == 0 || p.last != int8(i) || p.answered
}

// end stops a writer with no I/O. Its requests stay in flight; the writer set
// remembers whether any of its creates was left in doubt.
func (s *State) end(i int, c *ctx) {
	w := &s.w[i]
	p := &s.procs[writerProc[i]]
	p.last = int8(i)
	p.answered = !w.inDoubt()
	p.confirmed = w.phase == ready || w.phase == committing
	if w.held != 0 {
		// The appends waiting at the lag bound end with the writer's own
		// reason (fenced, aborted, stopped): the writer set moves them on.
		c.cover(covLagWaitEnded)
		if !c.has(LagWaitOutlivesStop) {
			c.note("w%d's appends of %s waiting at the lag bound end with it", i, idSet(w.held))
			w.held = 0
		}
	}
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
