package read

// StoredSize is the stored size of the record with id in shard, as far as
// the reader's cached manifest and indexes know it, without I/O; ok is
// false when they do not. A record's bytes never change (ids are unique
// and merges copy records as they are), so a known size is exact; the
// server charges it to its memory budget before reading the record.
func (r *Reader) StoredSize(shard, id string) (size int64, ok bool) {
	r.mu.Lock()
	cached, ok := r.manifests.Peek(shard)
	r.mu.Unlock()
	if !ok {
		return 0, false
	}
	_, _, e, ok := r.locate(shard, cached.view, id)
	if !ok {
		return 0, false
	}
	return int64(e.GetLength()), true
}
