// Package model is an executable model of the v2 commit protocol ("commit by
// create") of internal/shard, explored exhaustively by a small explicit-state
// model checker that runs under go test.
//
// The model is abstract on purpose: it does not import the real shard package.
// It holds the blob store (log positions, the manifest as a checkpoint, merged
// generations), the requests in flight, and the state machines of every actor:
// writers (claim, probe, fence, confirm, commit, wait at the lag bound,
// checkpoint, merge), a reader (manifest, probe, confirming manifest read,
// restart) and GC. Explore visits every interleaving of their steps, with lost
// and delayed responses, aborts, same-process replacements and creates that
// land after their sender is gone, checks the protocol's invariants on every
// transition, and on every state with no successor that nothing still waits
// (see invariants.go).
// docs/protocol-model.md lists what the model covers and abstracts away.
//
// Bounds: the default test explores DefaultConfig. Set
// ROLLOUTD_MODEL_BOUND=large (or =xl) to explore larger bounds; those runs take
// minutes and are not part of make test.
package model
