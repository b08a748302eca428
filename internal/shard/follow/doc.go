// Package follow serves following Scans from one reader per shard per
// process.
//
// A Set owns a tail reader for each shard that has followers. The reader
// is one goroutine: it reads the shard's new records from the store once
// (shard.Reader.ReadNew), polling adaptively and woken at once by the
// in-process Notifier on a local commit, and hands each run of records to
// every follower's bounded buffer. So the store reads a commit causes do
// not grow with the number of followers, and an idle follower costs the
// store nothing beyond its reader's polling.
//
// A follower (Set.Scan) runs in its caller's goroutine and nowhere else.
// It joins its shard's reader if one runs, or reads on its own up to the
// tail and starts one. When its cursor is behind what the reader had
// already handed out when it joined, it reads the gap on its own
// (shard.Follower.CatchUp) while its buffer collects what comes next; it
// delivers each record after its cursor exactly once, in seq order,
// through its own filter and field mask. A follower that lets its buffer
// fill is dropped from the reader and catches up on its own again from its
// cursor, so a slow follower never stalls the others and never skips a
// record. When a reader fails (a deleted shard, a storage error), it drops
// every follower and stops: each then reads on its own, which ends it with
// the error today's follow semantics give (or carries it on).
//
// When the last follower leaves, the reader stops, and the follower that
// left waits for its goroutine; Set.Close stops and waits for the rest.
//
// A Set with Options.IdleAfter parks a reader whose shard has been idle
// that long: it stops polling and waits for a commit of this process (the
// Notifier) or Set.Wake, so an idle shard costs the store nothing. Prefix
// subscriptions (internal/shard/subscribe) use such a Set of their own,
// with one watcher per prefix that lists the prefix and wakes the readers
// of the shards that changed; following Scans keep a Set that never parks.
//
// Readers are registered by shard. A subscription runs one follower per
// shard (Set.ScanSlots), and its followers share slots, so that however
// many shards it follows only a bounded number hold records of their own
// at once.
package follow
