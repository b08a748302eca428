// Package consumer stores consumers' positions: for a consumer, named by a
// shard prefix and a name, the cursor up to which it has processed each
// shard under the prefix, so that a trainer that restarts resumes where
// its ranks left off.
//
// A consumer is one blob, in the shards' store but outside "shards/" (so
// shard listings, purges and exports never see it):
//
//	consumers/_c/<name>              a consumer of every shard (prefix "")
//	consumers/<prefix>/_c/<name>     a consumer of the shards under prefix
//
// A prefix segment starts with a letter or digit, so "_c" never collides
// with a nested prefix, and a listing of "consumers/<prefix>/" finds
// exactly the consumers whose prefix lies under prefix.
//
// Every write is conditional (create-only, or If-Match the version read),
// and the rules that make concurrent writers safe are:
//
//   - A commit merges: each shard keeps the larger of its stored and its
//     committed cursor. Positions never move backwards by a commit, so two
//     members committing at once never lose each other's progress.
//   - Only a reset moves positions backwards (or drops them), and it starts
//     a new generation: a commit for an older generation is refused with
//     ErrReset, so a member still running on old positions cannot undo it.
//   - A commit that changes nothing writes nothing.
//   - A write whose answer was lost (blob.ErrOutcomeUnknown) is decided by
//     reading the consumer again, never assumed.
package consumer
