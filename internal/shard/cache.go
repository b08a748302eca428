package shard

import "github.com/rolloutd/rolloutd/internal/shard/shardlog"

// BlobCache holds what the writers and readers of a process keep of
// generation blobs, bounded in bytes; share one per process. It lives in
// the lower floor, shardlog, with the reads that fill it.
type BlobCache = shardlog.BlobCache

// NewBlobCache returns a cache that holds at most maxBytes.
func NewBlobCache(maxBytes int64) *BlobCache { return shardlog.NewBlobCache(maxBytes) }

// IndexCache is BlobCache's old name, which did not say that it also holds
// whole blobs.
//
// Deprecated: use BlobCache.
type IndexCache = BlobCache

// NewIndexCache is NewBlobCache.
//
// Deprecated: use NewBlobCache.
func NewIndexCache(maxBytes int64) *BlobCache { return NewBlobCache(maxBytes) }
