package shard

import (
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
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
	// with different client-set content. Errors of this class are
	// *IDConflictError values, naming the id.
	ErrIDConflict = errors.New("id already exists with different content")
	// ErrStale: a generation the writer's manifest lists is gone from
	// storage. That happens only once another writer took the shard over,
	// merged the generation away and collected it, so this writer can never
	// commit again. Nothing was sent; open a new writer and retry.
	ErrStale = errors.New("shard writer stale")
	// ErrShardNotFound: the shard has never been written.
	ErrShardNotFound = shardlog.ErrShardNotFound
	// ErrRecordNotFound: the shard has no record with that id.
	ErrRecordNotFound = shardlog.ErrRecordNotFound
	// ErrCorrupt: stored bytes failed to decode or verify. It wraps
	// format.ErrCorrupt and names the blob.
	ErrCorrupt = shardlog.ErrCorrupt
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

// IDConflictError reports the id of an append that is stored, or in flight,
// with other content.
type IDConflictError struct {
	Shard    string
	ID       string
	Seq      uint64 // the stored record's seq; 0 when it is in flight
	InFlight bool
}

func (e *IDConflictError) Error() string {
	if e.InFlight {
		return fmt.Sprintf("shard %q: id %q: %v (an append of it is in flight)", e.Shard, e.ID, ErrIDConflict)
	}
	return fmt.Sprintf("shard %q: id %q: %v (committed at seq %d)", e.Shard, e.ID, ErrIDConflict, e.Seq)
}

// Is makes errors.Is(err, ErrIDConflict) true for an *IDConflictError.
func (e *IDConflictError) Is(target error) bool { return target == ErrIDConflict }
