package shard

import (
	"errors"
	"fmt"
)

var (
	// ErrFenced: another writer claimed a higher epoch; this writer can never
	// commit again. Errors of this class are *FencedError values.
	ErrFenced = errors.New("shard writer fenced")
	// ErrClosed: the writer was closed (or is closing) and takes no appends.
	ErrClosed = errors.New("shard writer closed")
	// ErrAborted: the writer was aborted before the append was sent to
	// storage. It was not committed; retrying with the same ids is safe.
	ErrAborted = errors.New("shard writer aborted")
	// ErrOutcomeUnknown: the commit may or may not have landed. Retry with
	// the same ids: the retry either commits them or finds them present.
	ErrOutcomeUnknown = errors.New("commit outcome unknown")
	// ErrBackpressure: the writer already holds its cap of queued bytes.
	ErrBackpressure = errors.New("shard writer queue full")
	// ErrTooLarge: a record or batch exceeds the configured maximum.
	ErrTooLarge = errors.New("record or batch too large")
	// ErrIDConflict: the id is already committed (or in flight) in the shard
	// with different client-set content.
	ErrIDConflict = errors.New("id already exists with different content")
	// ErrShardNotFound: the shard has never been written.
	ErrShardNotFound = errors.New("shard not found")
	// ErrRecordNotFound: the shard has no record with that id.
	ErrRecordNotFound = errors.New("record not found")
	// ErrCorrupt: stored bytes failed to decode or verify. It wraps
	// format.ErrCorrupt and names the blob.
	ErrCorrupt = errors.New("corrupt shard data")
)

// FencedError reports the epoch this writer held and the higher epoch found
// in the manifest.
type FencedError struct {
	Shard  string
	Local  uint64
	Stored uint64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("shard %q: writer of epoch %d fenced by epoch %d", e.Shard, e.Local, e.Stored)
}

// Is makes errors.Is(err, ErrFenced) true for a *FencedError.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }
