// Package shardlog is the lower floor of the shard engine: what names,
// reads and caches a shard's stored blobs, shared by the writer and the
// read path above it. Source reads, decodes, checks and caches one
// shard's log entries, footer indexes and id filters, in one file, through
// the process-wide cache; beside it are the manifest read, the view of a
// checkpoint and its log, and the retry backoff. It knows no writer and no reader: nothing
// here imports the packages above it.
package shardlog
