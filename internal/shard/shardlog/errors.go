package shardlog

import "errors"

// The errors of reading a shard, which the writer and the read path share.
// The shard package hands them on as its own.
var (
	// ErrCorrupt: stored bytes failed to decode or verify. It wraps
	// format.ErrCorrupt and names the blob.
	ErrCorrupt = errors.New("corrupt shard data")
	// ErrShardNotFound: the shard has never been written.
	ErrShardNotFound = errors.New("shard not found")
	// ErrRecordNotFound: the shard has no record with that id.
	ErrRecordNotFound = errors.New("record not found")
	// ErrShardDeleted: the shard was deleted (it is a tombstone, or a
	// reader saw it replaced by a later incarnation). Its records are gone.
	ErrShardDeleted = errors.New("shard deleted")
)

// MaxReadRetries bounds how often a read looks again because a generation
// it listed was merged away and deleted meanwhile.
const MaxReadRetries = 3

// DefaultCacheBytes sizes a BlobCache that nobody shared: a writer's or a
// reader's private one.
const DefaultCacheBytes = 8 << 20
