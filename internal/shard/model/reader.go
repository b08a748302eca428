package model

// The reader's steps: a read of the manifest, probes past its checkpoint,
// and the confirming manifest read.

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
