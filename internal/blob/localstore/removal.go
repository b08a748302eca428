package localstore

import "sync"

// Group durability for removals.
//
// A Delete's unlink is durable only once its directory is fsynced, and the
// shard collector deletes many log positions of one directory, several at
// a time. One directory fsync makes every removal made in that directory
// before it started durable, so concurrent deletes share it: a delete that
// finds a sync of its directory in flight waits for it to end and then, if
// that sync started before its unlink, is covered; otherwise it joins the
// next sync, which one of the waiters starts for all of them. N deletes
// under one directory thus cost about one fsync per round, not N, and each
// still returns only once its own removal is durable.

// removals tracks, per directory, the removals made there and those that a
// finished directory sync covers.
type removals struct {
	mu   sync.Mutex
	dirs map[string]*removalDir
}

// removalDir is one directory's state, kept while a delete uses it.
type removalDir struct {
	users   int           // deletes between join and leave
	removed uint64        // removals made so far, counted after each unlink
	synced  uint64        // removals that the last finished sync covers
	syncing chan struct{} // non-nil while a sync runs: closed when it ends
	err     error         // the first failed sync's error: sticky, never retried
}

// durable returns once the removal the caller just made in dir (its unlink
// has returned) is durable, or with the error of the sync meant to make it
// so. sync makes dir's entries durable.
func (r *removals) durable(dir string, sync func(dir string) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.dirs[dir]
	if d == nil {
		if r.dirs == nil {
			r.dirs = map[string]*removalDir{}
		}
		d = &removalDir{}
		r.dirs[dir] = d
	}
	d.users++
	defer func() {
		if d.users--; d.users == 0 {
			delete(r.dirs, dir)
		}
	}()
	d.removed++
	mine := d.removed
	for d.synced < mine && d.err == nil {
		if d.syncing != nil {
			// Started before this removal, or not: look again once it ends.
			wait := d.syncing
			r.mu.Unlock()
			<-wait
			r.mu.Lock()
			continue
		}
		upto, done := d.removed, make(chan struct{})
		d.syncing = done
		r.mu.Unlock()
		err := sync(dir)
		r.mu.Lock()
		d.syncing = nil
		close(done)
		if err != nil && d.err == nil {
			d.err = err
		}
		d.synced = max(d.synced, upto)
	}
	return d.err
}
