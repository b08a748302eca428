package shard

// committer is the committer goroutine's state (logcommit.go). It takes
// the queued appends and creates each batch at the next log position; the
// checkpointer (checkpoint.go), not the committer, writes the manifest.
type committer struct {
	w    *writer
	kick chan struct{} // wakes it; capacity 1
	done chan struct{} // closed when it has exited

	// inDoubt: a create of a log position went out and was not answered,
	// by its reply or a read of the position. Only the committer goroutine
	// touches it; no lock.
	inDoubt bool
}

// wake tells the committer there is work, without blocking.
func (c *committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}
