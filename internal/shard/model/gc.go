package model

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
