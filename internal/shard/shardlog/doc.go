// Package shardlog is the lower floor of the shard engine: what names,
// reads and caches a shard's stored blobs, shared by the writer and the
// read path above it. It holds the log's entries and their probe, the
// manifest read, the footer indexes and id filters with their process-wide
// cache, and the retry backoff. It knows no writer and no reader: nothing
// here imports the packages above it.
package shardlog
