// Package format encodes and decodes the bytes rolloutd stores for a shard:
// the manifest blob and the immutable generation blobs, and their names.
//
// Every decoder here reads bytes that came from storage, so it treats them as
// hostile: corrupt input yields an error wrapping ErrCorrupt, never a panic
// and never wrong data. The decoders are fuzzed.
package format
