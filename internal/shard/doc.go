// Package shard is rolloutd's storage engine for one shard: the resident,
// epoch-fenced writer that group-commits appends, and the stateless reader
// that any instance uses to get a record.
//
// A shard is a manifest blob, immutable generation blobs and a commit log
// (see package format for the names and bytes). Writers commit only by
// protocol v2; a shard still in the v1 format (manifest format version 1,
// written by builds through 615b413, which committed by manifest CAS) is
// read as a checkpoint of an empty log, and the first claim converts it
// (see "Shards in the v1 format" below).
//
// # Protocol v2: commit by create
//
// A shard's commits form a log of positions 1, 2, 3, ..., one immutable blob
// each (_l/<position>), created with If-None-Match: *. An entry is a batch
// (epoch, writer, put id, records, footer, id filter) or a fence (epoch and
// next seq, no records). The manifest becomes a checkpoint: it lists
// everything the log holds up to its log_checkpoint, and a reader probes
// the positions after it.
//
//  1. Open claims epoch+1 by a CAS on the manifest (epoch.go), and
//     writes manifest format version 2. It then probes the log forward from
//     the checkpoint, reading what it inherits, creates a fence at the first
//     free position (moving forward on "exists"), and confirms with a CAS
//     on the manifest it claimed that checkpoints through the fence: it
//     lands only if no one claimed since, so the epoch is still current and
//     the fence lies beyond the checkpoint and so beyond anything collected
//     (claimlog.go). The fence is skipped only when no other writer can
//     have a create in doubt: the claim replaced the manifest of this
//     process's previous writer of the shard, which ended with every create
//     answered (Lineage), or the shard had never been claimed under v2.
//  2. Append looks its ids up in the checkpoint's generations and in the
//     log batches after it, inherited ones included (append.go), and queues
//     the new ones. The live batches the writer committed itself answer
//     from its memory (presence.go); the others through their Bloom
//     filters, which it keeps once read, within a bound (filtered.go).
//     The process's PresenceBudget bounds that memory over all writers;
//     past it the least recently used drop theirs (budget.go).
//  3. One committer takes everything queued and creates it as the batch at
//     position last+1; the appends are acknowledged when that create lands
//     (logcommit.go). No manifest is read or written on this path. A batch
//     is frozen at its position: every retry sends the same bytes with the
//     same put id.
//  4. A create that answers "exists", or whose outcome is unknown, is
//     decided by reading the position (create.go): this writer's put id means
//     it landed; a higher epoch means the writer is fenced; a lower epoch's
//     entry is a late landing of an earlier writer's create, which the
//     writer's replacement inherits; a position missing after an unknown
//     outcome is created again. A create that stays undecided stops the
//     writer (ErrOutcomeUnknown for its appends): it can never give the
//     position other bytes, and its replacement fences.
//  5. Off the ack path a checkpointer CASes the manifest to cover the log up
//     to the last position that landed, with the edits of merges and GC
//     (checkpoint.go): when CheckpointEvery (K) positions wait, when the
//     oldest unchecked position has waited CheckpointInterval, and at Close.
//     Merge and GC edits ride the next checkpoint the tail gets anyway; only
//     with an empty tail does an edit force one, after EditDelay. No
//     position beyond checkpoint+2K is
//     created until a checkpoint lands, so readers and claims probe a
//     bounded tail; a commit waiting there stops waiting, with the
//     writer's reason, when the writer stops (a checkpoint found it
//     fenced, say). A checkpoint covers every position of every generation
//     it lists.
//  6. Get and Scan read the manifest, then the log positions after its
//     checkpoint until the first missing one, which a manifest GET sent
//     after that probe confirms: if the new checkpoint covers the missing
//     position (it was collected, or created and checkpointed meanwhile),
//     the read starts again from it (read/reader.go). A reader that cached a
//     shard probes its cached tail's next position first. Get, BatchGet,
//     Scan and following scans all read records through one function,
//     resolve (read/resolve.go), which reads this view, finds records through
//     the shared cache, and reads the view again when a blob it listed was
//     collected or replaced by a late fence. A server's following scans
//     share one reader per shard (internal/shard/follow, over ReadNew and
//     Follower in read/follower.go): a commit is read once however many follow.
//  7. Merge outputs live in _g/ and only the manifest lists them. GC deletes
//     a log position only once a durable checkpoint covers it and a merge
//     retired it; a fence is never listed, never retired, so it is kept
//     until the shard is deleted: a stale writer's create into a collected
//     position would otherwise land, and be acknowledged, and no reader
//     would ever see it (SlateDB #352, #1622).
//
// # Shards in the v1 format
//
// Builds through 615b413 could also commit by manifest CAS (protocol v1):
// a generation blob named by epoch and number, then a CAS of the manifest
// that lists it. This build cannot, but it keeps what such a shard needs:
// it opens, reads and scans one (the reader probes its empty log, finds
// position 1 missing and reads the manifest's generations); a writer's
// claim, or a Delete's, converts it to v2 (epoch.go, delete.go), and the
// first log position follows its last generation's seqs; GC and Purge
// delete its generations, orphans of earlier epochs included, by name.
// Builds before v2 refuse a version 2 manifest (package format), so a fleet
// on such a build upgrades through 615b413 (docs/operations.md).
//
// # Records are stored in the API encoding
//
// A record is stored as the deterministic encoding of the rollout.v1.Record
// the client sent, with only what the server owns appended as fields (the
// id when it had none, created_at when absent, and seq as the generation is
// written): see Prepare. Get and Scan decode those bytes straight into the
// same API message. That is why shard imports rolloutv1: records pass
// through the store in the API's own encoding, with no storage schema to
// translate to and from, and the client hash that tells a resend from a
// conflicting id is taken over the client's own encoding.
//
// # Background work
//
// A batch is frozen at its log position, so commits never rewrite earlier
// generations. Beside the committer, a merger goroutine merges them
// (merger.go, with the policy in policy.go) and a collector deletes the
// generations merges retired (gc.go). Their blob I/O never sits in a
// commit's path. Their manifest edits (edit.go) join the next checkpoint,
// waiting up to Options.EditDelay for one before one is written for them
// alone, and the collector deletes what fell due in one burst per
// MergeInterval. A lone client's appends thus share the store with as
// little background work as possible: on Azurite, which serves one
// request at a time, that work shows up directly in a lone client's
// latency.
//
// # Who owns what
//
// Each goroutine has a file and a state of its own: the committer
// (committer.go, logcommit.go), the checkpointer (checkpoint.go), the
// merger (merger.go) and the collector (gc.go). Callers of Append run
// append.go. What more than one of them touches is in the writer under its
// mu (state.go lists the fields), or in the claims on generations that
// the merger rewrites (claims.go), which have their own lock. The
// committer creates log positions; only the claim and the checkpointer
// write the manifest.
//
// # Stopping: which path flushes, which discards
//
//   - Close(ctx) flushes: it refuses new appends, commits everything already
//     queued (and the manifest edit of a merge or GC pass already done), and
//     waits for the committer to exit. If ctx ends first it falls
//     back to Abort.
//   - Abort() discards un-acknowledged state: queued appends that were never
//     sent fail with ErrAborted, and an append whose commit was in flight fails
//     with ErrOutcomeUnknown (its create may still land). Abort does no I/O.
//   - Neither path can lose an acknowledged append: an ack is only given after
//     the log position that holds it is durable in the store.
//
// # Floors
//
// The engine is three packages whose imports are its layering. shardlog
// is the lower floor: the log's entries, their probe and view, the
// manifest read, footer and filter lookups with the process-wide
// BlobCache, the Notifier and the retry backoff; the format package
// under it encodes the bytes and names the blobs (format.GenKey.Blob is
// the one function that names a generation's blob). Above it stand, side
// by side, this package (the writer, and the names callers import) and
// package read (the read path), which never imports the writer.
package shard
