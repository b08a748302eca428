// Package read is the shard engine's read path: Get, BatchGet, Scan,
// following and Describe, for any shard, with or without a resident
// writer. It stands beside the writer, on the lower floor (shardlog) that
// both share, and knows nothing of the writer: what a writer committed
// reaches it through storage only, and, on the same instance, through a
// shardlog.Notifier's wake-up.
package read
