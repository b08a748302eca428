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
			if i != 2 || !cfg.Writers.has(0) || s.replaceable(0, cfg) {
				a(actClaim, 0)
			}
		case probing:
			a(actProbe, 0)
		case confirming:
			a(actConfirm, 0)
		case ready:
			room := int(w.tail) < cfg.Positions && int(w.tail) < int(w.ckpt)+2*cfg.LagK
			for x := 0; x < cfg.IDs; x++ {
				bit := uint8(1) << x
				switch {
				case w.known&bit != 0:
					if s.acked&bit == 0 {
						a(actAppend, uint8(x))
					}
				case w.held&bit != 0:
					if room {
						a(actAppend, uint8(x)) // its wait at the lag bound ends
					}
				case int(w.tail) < cfg.Positions:
					a(actAppend, uint8(x)) // sent, or waits at the lag bound
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

func (s *State) at(pos uint8) blob {
	if int(pos) >= len(s.log) {
		return blob{}
	}
	return s.log[pos]
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
