// Package shard is rolloutd's storage engine for one shard: the resident,
// epoch-fenced writer that group-commits appends, and the stateless reader
// that any instance uses to get a record.
//
// A shard is a manifest blob, immutable generation blobs and, under
// protocol v2, a commit log (see package format for the names and bytes).
// Options.Protocol selects how a writer commits; a shard a v2 writer has
// claimed is always written in v2.
//
// # Protocol v2: commit by create (the default)
//
// A shard's commits form a log of positions 1, 2, 3, ..., one immutable blob
// each (_l/<position>), created with If-None-Match: *. An entry is a batch
// (epoch, writer, put id, records, footer, id filter) or a fence (epoch and
// next seq, no records). The manifest becomes a checkpoint: it lists
// everything the log holds up to its log_checkpoint, and a reader probes
// the positions after it.
//
//  1. Open claims epoch+1 by a CAS on the manifest (epoch.go), as in v1, and
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
//     the new ones.
//  3. One committer takes everything queued and creates it as the batch at
//     position last+1; the appends are acknowledged when that create lands
//     (logcommit.go). No manifest is read or written on this path. A batch
//     is frozen at its position: every retry sends the same bytes with the
//     same put id.
//  4. A create that answers "exists", or whose outcome is unknown, is
//     decided by reading the position (logio.go): this writer's put id means
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
//     the read starts again from it (reader.go). A reader that cached a
//     shard probes its cached tail's next position first. Get, BatchGet,
//     Scan and following scans all read records through one function,
//     resolve (resolve.go), which reads this view, finds records through
//     the shared cache, and reads the view again when a blob it listed was
//     collected or replaced by a late fence. A server's following scans
//     share one reader per shard (internal/shard/follow, over ReadNew and
//     Follower in follower.go): a commit is read once however many follow.
//  7. Merge outputs live in _g/ and only the manifest lists them. GC deletes
//     a log position only once a durable checkpoint covers it and a merge
//     retired it; a fence is never listed, never retired, so it is kept
//     until the shard is deleted: a stale writer's create into a collected
//     position would otherwise land, and be acknowledged, and no reader
//     would ever see it (SlateDB #352, #1622).
//
// # Protocol v1: commit by manifest CAS
//
// The manifest is the single source of truth: a record is committed exactly
// when a manifest version that lists its generation has been written. v1
// exists for the first step of a rolling upgrade from a build that predates
// v2 (docs/operations.md).
//
//  1. Open claims epoch+1 with a conditional write of the manifest
//     (epoch.go): create-only when there is none, else If-Match on the
//     ETag read. A lost claim re-reads and claims the next epoch; a claim
//     whose answer was lost is decided by reading the manifest back.
//  2. Append checks its ids against the generations the manifest lists
//     (Bloom filters first, then footer indexes) and queues the new ones
//     (append.go). An id already committed comes back AlreadyPresent; an
//     id another append is committing shares that append's outcome.
//  3. One committer goroutine takes everything queued, up to
//     MaxGenerationBytes, writes it as one generation blob (create-only,
//     named by epoch and generation number), then compare-and-swaps the
//     manifest to list it (committer.go). Only after that CAS succeeds does
//     any waiting Append return. While a commit is in flight, new appends
//     queue for the next one: group commit without a linger timer.
//  4. A CAS that loses, or whose answer was lost, is decided by reading the
//     manifest back, never by local belief: the commit landed if the
//     manifest lists its generation, or this epoch's record names it as the
//     epoch's last commit (which survives a merge and a later claim). If
//     not, and a higher epoch holds the shard, the writer is fenced
//     (ErrFenced) and never commits again; a claim changed the manifest's
//     ETag, so its CAS never can. If the manifest changed under its own
//     epoch, the batch is committed again on the manifest read, after its
//     ids are looked up in the generations added since. Whatever cannot be
//     decided is reported as ErrOutcomeUnknown, and a retry with the same
//     ids then settles it: each id comes back committed or AlreadyPresent,
//     never stored twice.
//  5. Get reads the manifest (a conditional GET when cached), finds the id
//     through the cached filters and indexes of the live generations, and
//     reads the record with one ranged GET (reader.go). A generation that
//     is gone was merged away: Get reads the manifest again.
//
// An uncommitted generation of a fenced or aborted writer is an orphan: no
// manifest lists it, and none ever can. GC deletes it by name under a later
// epoch.
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
// Under protocol v1, a commit whose newest live generations form a small
// run folds them into
// its own generation and retires them in its CAS (fold.go), from bytes
// still cached, so a lone client's appends need no separate merge. Beside
// the committer, a merger goroutine collapses the rest (merger.go, with
// the policy in policy.go) and a collector deletes the generations merges
// and folds retired (gc.go). Their blob I/O never sits in a commit's path.
// Their manifest edits join the next commit's CAS (edit.go), waiting up to
// Options.EditDelay for one before they are committed alone, and the
// collector deletes what fell due in one burst per MergeInterval. A lone
// client's appends thus share the store with as little background work as
// possible: on Azurite, which serves one request at a time, that work
// shows up directly in a lone client's latency. Under protocol v2 a batch
// is frozen at its log position, so commits never fold: the merger merges,
// and its edits and GC's join the next checkpoint instead of a commit.
//
// # Who owns what
//
// Each goroutine has a file and a state of its own: the committer
// (committer.go, with prepare.go and fold.go), the merger (merger.go) and
// the collector (gc.go). Callers of Append run append.go. What more than
// one of them touches is in the writer under its mu (writer.go lists the
// fields), or in the claims on generations that the merger and the
// committer rewrite (claims.go), which have their own lock. Under protocol v1 only the
// committer writes the manifest; under v2 the committer creates log
// positions, and only the claim and the checkpointer (checkpoint.go) write
// the manifest.
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
