package shardlog

import "errors"

// ErrCorrupt: stored bytes failed to decode or verify. It wraps
// format.ErrCorrupt and names the blob. The shard package hands it on as
// its own ErrCorrupt.
var ErrCorrupt = errors.New("corrupt shard data")
