package consumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// maxAttempts bounds the writes one call tries. Each lost condition means
// another writer's write landed in between, so contention alone cannot
// exhaust it unless dozens of writers hit one consumer at once.
const maxAttempts = 32

// Backoff after blob.ErrUnavailable, which is known not applied: doubling
// from retryMin to retryMax.
const (
	retryMin = 10 * time.Millisecond
	retryMax = 500 * time.Millisecond
)

// After conflictsBeforeBackoff lost conditions in a row, a writer waits a
// random time below conflictBackoff times the conflicts before it re-reads,
// so that a writer whose read-merge-write is slower than another's is not
// starved by it.
const (
	conflictsBeforeBackoff = 2
	conflictBackoff        = 2 * time.Millisecond
)

// Load returns k's consumer. Errors: ErrNotFound, ErrCorrupt, invalid keys
// (validate.ErrInvalid), and the store's classes wrapped.
func (s *Store) Load(ctx context.Context, k Key) (*Consumer, error) {
	k, err := k.Normalize()
	if err != nil {
		return nil, err
	}
	r, _, err := s.read(ctx, k)
	if err != nil {
		return nil, err
	}
	return r.c, nil
}

// read reads k's stored version and its ETag.
func (s *Store) read(ctx context.Context, k Key) (record, blob.ETag, error) {
	name := blobName(k)
	b, attrs, err := s.store.Get(ctx, name, blob.GetOptions{})
	if errors.Is(err, blob.ErrNotFound) {
		return record{}, "", fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	if err != nil {
		return record{}, "", fmt.Errorf("read consumer %s: %w", k, err)
	}
	r, err := decode(b)
	if err != nil {
		return record{}, "", fmt.Errorf("consumer %s (%s): %w", k, name, err)
	}
	if r.c.Key != k {
		return record{}, "", fmt.Errorf("%w: %s holds consumer %s", ErrCorrupt, name, r.c.Key)
	}
	return r, attrs.ETag, nil
}

// Commit merges positions into k's consumer, creating it (at generation 1)
// when it does not exist: each shard keeps the larger of its stored and its
// committed cursor, so concurrent commits never lose progress. A commit
// that raises no cursor (and finds the consumer) writes nothing.
//
// generation, when not 0, is the generation the positions belong to: when
// the consumer's is another, the commit stores nothing and returns a
// *ResetError (ErrReset). A consumer that does not exist takes commits for
// generation 1, the one it is created with, and refuses higher ones (it
// was deleted since; ResetError.Generation 0).
//
// It returns the consumer as stored after the commit. Errors: ErrReset,
// ErrTooManyPositions, validate.ErrInvalid (a key, or a shard not under the
// prefix), ErrCorrupt, and the store's classes wrapped; one that wraps
// blob.ErrOutcomeUnknown may have stored the positions.
func (s *Store) Commit(ctx context.Context, k Key, positions map[string]uint64, generation uint64) (*Consumer, error) {
	k, err := k.Normalize()
	if err != nil {
		return nil, err
	}
	if err := ValidatePositions("positions", k.Prefix, positions); err != nil {
		return nil, err
	}
	w := s.newWriter(ctx, k, "commit")
	id := newID()
	for w.next() {
		cur, etag, err := s.read(ctx, k)
		missing := errors.Is(err, ErrNotFound)
		if err != nil && !missing {
			return nil, w.failed(err)
		}
		var have uint64
		if !missing {
			have = cur.c.Generation
		}
		if generation != 0 && generation != have && !(missing && generation == 1) {
			return nil, &ResetError{Key: k, Generation: have, Committed: generation}
		}
		now := s.clock.Now().UTC()
		next := record{c: &Consumer{Key: k, Generation: 1, Positions: maps.Clone(positions), CreatedAt: now, UpdatedAt: now},
			writeID: id, generationID: id}
		if next.c.Positions == nil {
			next.c.Positions = map[string]uint64{}
		}
		if !missing {
			merged, changed := merge(cur.c.Positions, positions)
			if !changed {
				// Everything committed is stored: by an earlier write of
				// this call whose answer was lost, or by another writer.
				return cur.c.clone(), nil
			}
			next.c.Positions, next.c.Generation, next.c.CreatedAt = merged, cur.c.Generation, cur.c.CreatedAt
			next.generationID = cur.generationID
		}
		if len(next.c.Positions) > s.maxPositions {
			return nil, fmt.Errorf("%w: committing to consumer %s would store %d positions, at most %d are stored per consumer; use consumers of narrower prefixes",
				ErrTooManyPositions, k, len(next.c.Positions), s.maxPositions)
		}
		if done, err := w.put(next, etag, missing); done {
			if err != nil {
				return nil, err
			}
			return next.c.clone(), nil
		}
	}
	return nil, w.exhausted()
}

// merge returns stored raised by committed, shard by shard, and whether
// anything rose. stored is not modified.
func merge(stored, committed map[string]uint64) (map[string]uint64, bool) {
	changed := false
	for sh, seq := range committed {
		if old, ok := stored[sh]; !ok || seq > old {
			changed = true
			break
		}
	}
	if !changed {
		return stored, false
	}
	out := make(map[string]uint64, len(stored)+len(committed))
	maps.Copy(out, stored)
	for sh, seq := range committed {
		if old, ok := out[sh]; !ok || seq > old {
			out[sh] = seq
		}
	}
	return out, true
}

// Reset sets k's positions to exactly positions (none for "from the first
// record of every shard"), backwards included, and starts a new
// generation: the stored one plus one, or 2 for a consumer it creates
// (see below).
// Commits for older generations are refused from then on.
//
// It returns the consumer as stored. After a lost answer it re-reads: a
// reset that landed is recognised by its generation's id even when commits
// were merged on top of it since (then those positions are returned). Two
// concurrent resets both apply, one after the other.
//
// Errors: ErrTooManyPositions, validate.ErrInvalid, ErrCorrupt (the stored
// consumer does not verify: its generation is unknown, so it is not
// overwritten; Delete it, then reset or commit afresh) and the store's
// classes wrapped; one that wraps blob.ErrOutcomeUnknown may have reset
// the consumer.
func (s *Store) Reset(ctx context.Context, k Key, positions map[string]uint64) (*Consumer, error) {
	k, err := k.Normalize()
	if err != nil {
		return nil, err
	}
	if err := ValidatePositions("positions", k.Prefix, positions); err != nil {
		return nil, err
	}
	w := s.newWriter(ctx, k, "reset")
	id := newID()
	for w.next() {
		cur, etag, err := s.read(ctx, k)
		missing := errors.Is(err, ErrNotFound)
		if err != nil && !missing {
			return nil, w.failed(err)
		}
		if !missing && w.unclear != nil && cur.generationID == id {
			return cur.c.clone(), nil
		}
		now := s.clock.Now().UTC()
		// A reset that creates the consumer starts it at generation 2, not
		// the 1 a first commit creates it with: a member that subscribed
		// before the consumer existed commits for generation 1, and must
		// be refused rather than raise the reset positions again.
		next := record{c: &Consumer{Key: k, Generation: 2, Positions: maps.Clone(positions), CreatedAt: now, UpdatedAt: now},
			writeID: id, generationID: id}
		if next.c.Positions == nil {
			next.c.Positions = map[string]uint64{}
		}
		if !missing {
			next.c.Generation, next.c.CreatedAt = cur.c.Generation+1, cur.c.CreatedAt
		}
		if done, err := w.put(next, etag, missing); done {
			if err != nil {
				return nil, err
			}
			s.log.Debug("consumer reset", zap.String("consumer", k.String()), zap.String("prefix", k.Prefix),
				zap.Uint64("generation", next.c.Generation), zap.Int("positions", len(next.c.Positions)))
			return next.c.clone(), nil
		}
	}
	return nil, w.exhausted()
}

// Delete deletes k's consumer. Errors: ErrNotFound (it did not exist),
// validate.ErrInvalid, and the store's classes wrapped; one that wraps
// blob.ErrOutcomeUnknown may have deleted it.
func (s *Store) Delete(ctx context.Context, k Key) error {
	k, err := k.Normalize()
	if err != nil {
		return err
	}
	w := s.newWriter(ctx, k, "delete")
	name := blobName(k)
	for w.next() {
		err := s.store.Delete(ctx, name, blob.DeleteOptions{})
		switch {
		case err == nil:
			s.log.Debug("consumer deleted", zap.String("consumer", k.String()), zap.String("prefix", k.Prefix))
			return nil
		case errors.Is(err, blob.ErrNotFound):
			if w.unclear != nil {
				// The earlier delete whose answer was lost landed (or
				// another caller's did): the consumer is gone.
				return nil
			}
			return fmt.Errorf("%w: %s", ErrNotFound, k)
		}
		if done, err := w.retry(err); done {
			return err
		}
	}
	return w.exhausted()
}

// writer runs the attempts of one write call: it counts them, backs off
// after a store that was unavailable, and remembers a write whose answer
// was lost, so that the call never reports that write's failure as "not
// stored", nor its success before a re-read showed it.
type writer struct {
	s        *Store
	ctx      context.Context
	k        Key
	op       string
	attempts int
	// conflicts counts the conditions lost in a row.
	conflicts int
	backoff   time.Duration
	// unclear is the last write whose outcome is unknown, until a re-read
	// decides it.
	unclear error
	last    error
}

func (s *Store) newWriter(ctx context.Context, k Key, op string) *writer {
	return &writer{s: s, ctx: ctx, k: k, op: op}
}

// next reports whether another attempt may start.
func (w *writer) next() bool {
	w.attempts++
	return w.attempts <= maxAttempts && w.ctx.Err() == nil
}

// put writes r: create-only when missing, else If-Match etag. done reports
// that the call ends here, with err (nil: r is stored); otherwise the
// caller re-reads and tries again.
func (w *writer) put(r record, etag blob.ETag, missing bool) (done bool, err error) {
	data, err := encode(r)
	if err != nil {
		return true, err
	}
	opts := blob.PutOptions{IfMatch: etag, PutID: r.writeID + "." + fmt.Sprint(w.attempts)}
	if missing {
		opts = blob.PutOptions{IfNoneMatch: true, PutID: opts.PutID}
	}
	_, err = w.s.store.Put(w.ctx, blobName(w.k), data, opts)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, blob.ErrConditionFailed) {
		// Another writer's write landed since the read (or this call's
		// own, whose answer was lost): re-read and merge again.
		w.last = err
		w.conflicts++
		if w.conflicts > conflictsBeforeBackoff {
			if err := w.wait(time.Duration(mrand.Int64N(int64(conflictBackoff) * int64(w.conflicts)))); err != nil {
				return true, w.failed(err)
			}
		}
		return false, nil
	}
	return w.retry(err)
}

// retry decides a failed write: done with the error to return, or not done
// and the caller re-reads (after a backoff if the store was unavailable).
func (w *writer) retry(err error) (done bool, _ error) {
	w.last = err
	switch {
	case errors.Is(err, blob.ErrStoreFailed):
		return true, w.failed(err)
	case errors.Is(err, blob.ErrOutcomeUnknown):
		w.unclear = err
		w.s.log.Info("consumer write unclear, re-reading", zap.String("consumer", w.k.String()), zap.String("op", w.op), zap.Error(err))
		return false, nil
	case errors.Is(err, blob.ErrUnavailable):
		w.backoff = min(max(2*w.backoff, retryMin), retryMax)
		if w.wait(w.backoff) != nil {
			return true, w.failed(err)
		}
		return false, nil
	}
	return true, w.failed(err)
}

// wait waits d, or until the call's context ends (its error). Backoffs
// wait on the wall clock, not the Store's: that one only stamps times.
func (w *writer) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// failed is the error that ends the call on err: it also wraps the unclear
// write, if any, so that it never reads as "not stored".
func (w *writer) failed(err error) error {
	if w.unclear != nil && !errors.Is(err, blob.ErrOutcomeUnknown) {
		return fmt.Errorf("%s consumer %s: %w (after a write whose outcome is unknown: %w)", w.op, w.k, err, w.unclear)
	}
	return fmt.Errorf("%s consumer %s: %w", w.op, w.k, err)
}

// exhausted is the error once the attempts or the context ran out.
func (w *writer) exhausted() error {
	if err := w.ctx.Err(); err != nil {
		return w.failed(err)
	}
	err := fmt.Errorf("%d attempts, each lost to another write or failed: %w", maxAttempts, blob.ErrUnavailable)
	if w.last != nil {
		err = fmt.Errorf("%d attempts, each lost to another write or failed, the last: %w", maxAttempts, w.last)
		if !errors.Is(w.last, blob.ErrUnavailable) && !errors.Is(w.last, blob.ErrOutcomeUnknown) {
			err = fmt.Errorf("%w (%w)", err, blob.ErrUnavailable)
		}
	}
	return w.failed(err)
}

// newID is a random id for one write.
func newID() string { return rand.Text() }
