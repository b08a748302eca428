// Package subscribe serves subscriptions to every shard under a prefix:
// the shards that exist and those created while a subscription runs, each
// shard's acknowledged records in seq order, from where the subscription
// starts each shard (its first record, its last seq at the start, or a
// consumer's stored positions).
//
// # Routing
//
// Any instance serves any prefix: it delivers every shard under it. A
// shard whose writer is in this process is woken by the in-process
// Notifier at its commit; every other shard is found changed by polling.
//
// # Per-shard delivery
//
// A subscription runs one follower per shard of its share, a goroutine it
// owns and waits for, on a follow.Set that the engine keeps for
// subscriptions alone: one shared reader per shard per process, so the
// store reads a commit causes do not grow with the number of subscribers.
// The readers of that Set park (follow.Options.IdleAfter): a shard idle
// for IdleAfter is not polled any more until a commit of this process or
// a wake. A new reader parks after its first read that finds nothing
// (ParkAtStart), since its follower has just read up to the tail: a
// subscription over many idle shards costs each a few reads to start,
// not IdleAfter of polling, and a shard another instance writes is woken
// by the next listing.
//
// # Watchers
//
// One watcher per prefix per process, shared by every subscription of the
// prefix, lists "shards/<prefix>/" flat (every page) each WatchInterval
// and keeps each shard's signature: its manifest's ETag and its highest
// log position. A changed signature wakes the shard's reader; a shard not
// seen before is added to the subscriptions whose share takes it. So an
// idle shard costs a share of a few List calls per interval, and a parked
// shard delivers its next record within about WatchInterval plus a read.
//
// # Split
//
// Member i of n takes shard s iff Member(s, n) == i: rendezvous hashing
// with XXH64 (see Member for the exact function, which other languages
// reproduce), so members agree with no coordinator and a change of n
// moves about 1/(n+1) of the shards. While members disagree about n, a
// shard may be read by two members or by none for a while; it is never
// skipped, because positions are per shard.
//
// # Deleted shards
//
// A shard whose incarnation a follower read is deleted: the subscription
// sends a deletion with the follower's cursor and follows the name on from
// that cursor. A shard's seqs continue above every seq of its deleted
// incarnations, so a re-created shard's records all come after it.
// Restoring a backup that lowers a shard's seqs breaks this: reset the
// consumers of those shards.
//
// # Memory
//
// A subscription's followers share Slots slots: a follower holds records
// of its own (a read of at most ReadBytes, and a batch of at most the
// request's BatchBytes) only while it holds a slot, and sends one message
// at a time. What a subscription holds is therefore at most
//
//	Slots × (ReadBytes + BatchBytes)                 of its own, and
//	shards × BufferBytes (+ one run past it)         of records its
//	                                                 followers' buffers
//	                                                 share with the
//	                                                 shared readers
//
// 8 × (1 MiB + 256 KiB) and 256 KiB per busy shard with the defaults. A
// follower whose buffer fills (a slow client) is dropped from the shared
// reader and catches up on its own later, in a slot: a slow client never
// holds up the reader, so never another subscriber.
package subscribe
