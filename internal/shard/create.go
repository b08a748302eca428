package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// createOutcome is what a create of one log position came to.
type createOutcome int

const (
	// created: this writer's entry is at the position.
	created createOutcome = iota
	// taken: another writer's entry is at the position (createResult.found).
	taken
)

// createResult is a decided create: created, or taken by found.
type createResult struct {
	outcome createOutcome
	found   *shardlog.Entry
}

// errUndecided: a create was sent and neither its answer nor a read of the
// position decided it before ctx ended. It may still land.
var errUndecided = errors.New("create of a log position undecided")

// createAt creates the log entry data, whose put id is putID, at position,
// create-only, and decides the outcome (issue 21, section 3). An answer of
// "exists", or of unknown outcome, is decided by reading the position: this
// writer's put id means it landed, another entry that the position is
// taken. A position read as missing after an unknown outcome is created
// again. Every try sends data unchanged, with the same put id.
//
// Its error wraps errUndecided when a try may have landed (it may land
// yet); any other error means nothing of it is stored.
func (w *writer) createAt(ctx context.Context, position uint64, data []byte, putID string) (createResult, error) {
	name := format.LogName(w.shard, position)
	opts := blob.PutOptions{IfNoneMatch: true, PutID: putID}
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	var last error
	mayHaveLanded := false
	for {
		if err := ctx.Err(); err != nil {
			return createResult{}, w.undecided(mayHaveLanded, position, err, last)
		}
		_, err := w.store.Put(ctx, name, data, opts)
		switch {
		case err == nil:
			return createResult{outcome: created}, nil
		case errors.Is(err, blob.ErrUnavailable):
			// Known not applied: send the same create again.
			last = err
			if werr := b.Wait(ctx); werr != nil {
				return createResult{}, w.undecided(mayHaveLanded, position, werr, last)
			}
			continue
		case errors.Is(err, blob.ErrInvalidName), errors.Is(err, blob.ErrNoSpace),
			errors.Is(err, blob.ErrStoreFailed) && !errors.Is(err, blob.ErrOutcomeUnknown):
			// Not applied, and retrying cannot help (a full store only
			// once something frees space: the writer stays, and its
			// next batch tries this position again).
			return createResult{}, w.undecided(mayHaveLanded, position, err, last)
		case errors.Is(err, blob.ErrConditionFailed):
		default:
			// Unknown outcome, or a failure that does not say it was not
			// applied (the writer's context ending among them).
			mayHaveLanded = true
		}
		last = err
		e, rerr := w.readPosition(ctx, position, b)
		switch {
		case rerr == nil && e.PutID == putID:
			return createResult{outcome: created}, nil
		case rerr == nil:
			return createResult{outcome: taken, found: e}, nil
		case !errors.Is(rerr, blob.ErrNotFound):
			return createResult{}, w.undecided(mayHaveLanded, position, rerr, last)
		case errors.Is(err, blob.ErrConditionFailed) && !mayHaveLanded:
			// It existed and is gone: collected, which only a checkpoint
			// covering it allows, by a writer that took the shard over.
			// Nothing of this writer's is there, and it must not create
			// into a collected position.
			return createResult{}, fmt.Errorf("shard %q epoch %d: log position %d was collected under this writer: %w", w.shard, w.epoch, position, ErrStale)
		}
		// Missing after an unknown outcome: create it again.
		if werr := b.Wait(ctx); werr != nil {
			return createResult{}, w.undecided(true, position, werr, last)
		}
	}
}

// readPosition reads the log entry at position, retrying retryable
// failures until ctx ends. A missing position is blob.ErrNotFound.
func (w *writer) readPosition(ctx context.Context, position uint64, b *shardlog.Backoff) (*shardlog.Entry, error) {
	for {
		e, err := w.source().Entry(ctx, position, w.opts.Clock.Now().UnixNano())
		if err == nil || !shardlog.Retryable(err) {
			return e, err
		}
		if werr := b.Wait(ctx); werr != nil {
			return nil, fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}

// undecided is the error of a create that stopped with err: it wraps
// errUndecided when a try may have landed.
func (w *writer) undecided(mayHaveLanded bool, position uint64, err, last error) error {
	if last != nil && !errors.Is(err, last) {
		err = fmt.Errorf("%w (last storage error: %w)", err, last)
	}
	if !mayHaveLanded {
		return fmt.Errorf("shard %q: create log position %d: %w", w.shard, position, err)
	}
	return fmt.Errorf("shard %q epoch %d: create of log position %d (%w): %w", w.shard, w.epoch, position, errUndecided, err)
}
