// Package shard is rolloutd's storage engine for one shard: the resident,
// epoch-fenced writer that group-commits appends, and the stateless reader
// that any instance uses to get a record.
//
// A shard is a manifest blob plus immutable generation blobs (see package
// format). The manifest is the single source of truth: a record is committed
// exactly when a manifest version that lists its generation has been written.
//
// # Protocol
//
// Open claims epoch+1 with a conditional write of the manifest. One committer
// goroutine per writer takes everything queued, writes it as one generation
// blob (create-only, named by epoch and generation number), then
// compare-and-swaps the manifest to add it. Only after that CAS succeeds does
// any waiting Append return. A claim by another writer changes the manifest's
// ETag, so the stale writer's next CAS fails and, on re-reading, it finds a
// higher epoch: ErrFenced. A CAS whose outcome is unclear is decided by
// re-reading the manifest, never by local belief.
//
// # Background work
//
// A commit whose newest live generations form a small run folds them into
// its own generation and retires them in its CAS (fold.go), from bytes
// still cached, so a lone client's appends need no separate merge. Beside
// the committer, a merger goroutine collapses the rest (merge.go) and a
// collector deletes the generations merges and folds retired (gc.go). Their blob I/O
// never sits in a commit's path. Their manifest edits join the next
// commit's CAS, waiting up to Options.EditDelay for one before they are
// committed alone, and the collector deletes what fell due in one burst per
// MergeInterval. A lone client's appends thus share the store with as
// little background work as possible: on Azurite, which serves one request
// at a time, that work shows up directly in a lone client's latency.
//
// # Stopping: which path flushes, which discards
//
//   - Close(ctx) flushes: it refuses new appends, commits everything already
//     queued (and the manifest edit of a merge or GC pass already done), and
//     waits for the committer to exit. If ctx ends first it falls
//     back to Abort.
//   - Abort() discards un-acknowledged state: queued appends that were never
//     sent fail with ErrAborted, and an append whose commit was in flight fails
//     with ErrOutcomeUnknown (its CAS may still land). Abort does no I/O.
//   - Neither path can lose an acknowledged append: an ack is only given after
//     the manifest that holds it is durable in the store.
package shard
