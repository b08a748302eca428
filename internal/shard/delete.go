package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// DeleteOptions configures Delete.
type DeleteOptions struct {
	// ExpectedLastSeq, when set, makes the delete conditional: it is
	// refused with a *SeqMismatchError unless the last seq of the manifest
	// the tombstone replaces is this value.
	ExpectedLastSeq *uint64
	// Clock stamps the tombstone; nil means the real clock.
	Clock clock.Clock
	// RetryBackoff paces re-reads after a lost or unclear CAS; default
	// DefaultRetryBackoff.
	RetryBackoff time.Duration
}

// Deletion is what a Delete did.
type Deletion struct {
	// LastSeq is the deleted incarnation's last seq; the next gets seqs
	// above it.
	LastSeq uint64
	// Records the deleted incarnation held; 0 when AlreadyDeleted.
	Records uint64
	// Incarnation is the tombstone's incarnation, which the next writer
	// continues.
	Incarnation uint64
	// AlreadyDeleted: the shard was a tombstone already; nothing was
	// written.
	AlreadyDeleted bool
	// ThroughEpoch: every generation blob of an epoch at or below it is
	// garbage, for Purge.
	ThroughEpoch uint64
}

// Delete deletes the shard: it claims the next epoch with a manifest CAS
// that writes the tombstone state (a new incarnation number; no
// generations; next_seq, next_generation and the epoch records kept). That
// CAS is the delete: from then on every writer of the old incarnation, on
// any instance, is fenced (its CAS names a manifest version that is gone,
// and the re-read shows a higher epoch), and readers find no records.
// Reclaiming the old generation blobs is Purge's, afterwards.
//
// A shard that is already a tombstone is left as it is (AlreadyDeleted),
// so a repeated Delete only resumes the purge. Errors: ErrShardNotFound,
// *SeqMismatchError, ErrCorrupt, a storage error, or ctx's error; an
// unclear CAS is decided by reading the manifest back (its commit id; for
// a v2 tombstone its deleted_through_epoch, see unclearTombstone), and
// ErrOutcomeUnknown when that cannot decide.
func Delete(ctx context.Context, store blob.Store, shard string, opts DeleteOptions) (Deletion, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.RetryBackoff <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	backoff := shardlog.NewBackoff(opts.Clock, opts.RetryBackoff)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	putID := "delete-" + hex.EncodeToString(rnd[:])
	name := format.ManifestName(shard)
	var unsure unclearTombstone
	for {
		if err := ctx.Err(); err != nil {
			return Deletion{}, unsure.wrap(fmt.Errorf("delete shard %q: %w", shard, err))
		}
		cur, etag, err := shardlog.ReadManifest(ctx, store, shard)
		switch {
		case errors.Is(err, blob.ErrNotFound):
			return Deletion{}, fmt.Errorf("delete shard %q: %w", shard, ErrShardNotFound)
		case err != nil && shardlog.Retryable(err):
			if werr := backoff.Wait(ctx); werr != nil {
				return Deletion{}, unsure.wrap(fmt.Errorf("delete shard %q: %w (last storage error: %w)", shard, werr, err))
			}
			continue
		case err != nil:
			return Deletion{}, unsure.wrap(fmt.Errorf("delete shard %q: %w", shard, err))
		}
		if mine, err := unsure.decide(shard, cur); err != nil {
			return Deletion{}, err
		} else if mine != nil {
			return deletion(mine, false), nil
		}
		if cur.GetCommitId() == putID {
			// An unclear attempt of this call landed.
			return deletion(cur, false), nil
		}
		if ts := cur.GetTombstone(); ts != nil {
			return deletion(cur, true), nil
		}
		if isV2(cur) {
			d, done, err := deleteV2(ctx, store, shard, opts, cur, etag, putID, &unsure)
			if done || err != nil {
				return d, err
			}
			continue // another claim got in first: look again
		}
		last := cur.GetNextSeq() - 1
		if opts.ExpectedLastSeq != nil && *opts.ExpectedLastSeq != last {
			return Deletion{}, &SeqMismatchError{Shard: shard, Expected: *opts.ExpectedLastSeq, LastSeq: last}
		}
		next := tombstoneOf(cur, putID, opts.Clock.Now())
		data, err := format.EncodeManifest(next)
		if err != nil {
			return Deletion{}, err
		}
		_, err = store.Put(ctx, name, data, blob.PutOptions{IfMatch: etag, PutID: putID})
		switch {
		case err == nil:
			return deletion(next, false), nil
		case errors.Is(err, blob.ErrConditionFailed):
			// A writer committed or claimed meanwhile: look again, and
			// check the expected seq against what it wrote.
		case shardlog.Retryable(err):
			// The CAS may have landed: the re-read's commit id decides.
			if werr := backoff.Wait(ctx); werr != nil {
				return Deletion{}, fmt.Errorf("delete shard %q: %w (its tombstone may have been written: %w)", shard, werr, err)
			}
		default:
			return Deletion{}, fmt.Errorf("delete shard %q: write tombstone: %w", shard, err)
		}
	}
}

// tombstoneOf is the tombstone that replaces cur.
func tombstoneOf(cur *storagepb.Manifest, putID string, now time.Time) *storagepb.Manifest {
	next := proto.CloneOf(cur)
	next.Epoch = cur.GetEpoch() + 1
	next.Owner = putID
	next.CommitId = putID
	next.UpdatedUnixNanos = now.UnixNano()
	next.Generations = nil
	next.RetiredBatches = nil // the purge deletes them with the rest
	next.RetiredRuns = nil
	next.RecordCount = 0
	next.Incarnation = cur.GetIncarnation() + 1
	next.CreatedUnixNanos = 0
	next.LastCommitUnixNanos = 0
	next.DeletedThroughEpoch = next.GetEpoch()
	next.Tombstone = &storagepb.Tombstone{
		DeletedUnixNanos: now.UnixNano(),
		LastSeq:          cur.GetNextSeq() - 1,
		Records:          cur.GetRecordCount(),
	}
	// The old epochs' records stay: a fenced writer's unclear commit is
	// still decided by them (a commit that landed before the tombstone was
	// committed, and is deleted with the rest).
	next.Epochs = append(next.Epochs, &storagepb.EpochRecord{Epoch: next.GetEpoch()})
	pruneEpochs(next, DefaultMaxEpochRecords)
	return next
}

func deletion(m *storagepb.Manifest, already bool) Deletion {
	d := Deletion{
		LastSeq:        m.GetNextSeq() - 1,
		Incarnation:    m.GetIncarnation(),
		AlreadyDeleted: already,
		ThroughEpoch:   m.GetDeletedThroughEpoch(),
	}
	if ts := m.GetTombstone(); ts != nil && !already {
		d.Records = ts.GetRecords()
	}
	return d
}

// deleteV2 deletes a protocol v2 shard whose manifest cur (ETag etag) it
// read. The tombstone must also fence the log, and the expected last seq
// is checked against the log's tail up to that fence: so it claims the
// shard as a v2 writer does (a CAS to the next epoch), probes the log,
// fences it at the first free position, and only then writes the
// tombstone, a CAS on its claim that checkpoints through the fence. A
// writer of the old incarnation is fenced by the claim's ETag and by the
// fence in the log. done is false when another claim got in first.
func deleteV2(ctx context.Context, store blob.Store, shard string, opts DeleteOptions, cur *storagepb.Manifest, etag blob.ETag, putID string, unsure *unclearTombstone) (_ Deletion, done bool, _ error) {
	name := format.ManifestName(shard)
	if opts.ExpectedLastSeq != nil {
		// Seqs only grow: a tail already past the expected seq refuses the
		// delete without claiming (and fencing) the live writer.
		found, err := shardlog.Probe(ctx, store, NewBlobCache(1<<20), shard, cur.GetLogCheckpoint()+1, 0)
		if err != nil {
			return Deletion{}, false, fmt.Errorf("delete shard %q: probe the log: %w", shard, err)
		}
		last := cur.GetNextSeq() - 1
		for _, e := range found {
			last = max(last, e.NextSeq-1)
		}
		if last > *opts.ExpectedLastSeq {
			return Deletion{}, true, &SeqMismatchError{Shard: shard, Expected: *opts.ExpectedLastSeq, LastSeq: last}
		}
	}
	claim := proto.CloneOf(cur)
	claim.Epoch = cur.GetEpoch() + 1
	claim.Owner = putID
	claim.CommitId = putID + "-claim"
	claim.Epochs = append(claim.Epochs, &storagepb.EpochRecord{Epoch: claim.GetEpoch()})
	pruneEpochs(claim, DefaultMaxEpochRecords)
	data, err := format.EncodeManifest(claim)
	if err != nil {
		return Deletion{}, false, err
	}
	attrs, err := store.Put(ctx, name, data, blob.PutOptions{IfMatch: etag, PutID: claim.GetCommitId()})
	if err != nil {
		m, metag, rerr := shardlog.ReadManifest(ctx, store, shard)
		if rerr != nil || m.GetCommitId() != claim.GetCommitId() {
			if errors.Is(err, blob.ErrConditionFailed) || shardlog.Retryable(err) {
				return Deletion{}, false, nil
			}
			return Deletion{}, false, fmt.Errorf("delete shard %q: claim: %w", shard, err)
		}
		attrs.ETag = metag
	}
	// A writer of the claimed epoch, for the log's fence.
	w := &writer{store: store, shard: shard, epoch: claim.GetEpoch(), id: putID,
		opts: Options{Clock: opts.Clock, RetryBackoff: opts.RetryBackoff}.withDefaults()}
	found, err := shardlog.Probe(ctx, store, w.opts.Cache, shard, cur.GetLogCheckpoint()+1, 0)
	if err != nil {
		return Deletion{}, false, fmt.Errorf("delete shard %q: probe the log: %w", shard, err)
	}
	lastSeq, records := cur.GetNextSeq()-1, cur.GetRecordCount()
	pos := cur.GetLogCheckpoint() + 1
	tally := func(e *shardlog.Entry) {
		lastSeq = max(lastSeq, e.NextSeq-1)
		if e.Gen != nil {
			records += uint64(e.Gen.GetRecords())
		}
		pos = e.Position + 1
	}
	for _, e := range found {
		if e.Epoch > claim.GetEpoch() {
			return Deletion{}, false, nil
		}
		tally(e)
	}
	for {
		fence, err := format.EncodeFence(format.LogEntry{Shard: shard, Epoch: claim.GetEpoch(), Position: pos, Writer: putID, PutID: putID + "-fence", NextSeq: lastSeq + 1})
		if err != nil {
			return Deletion{}, false, err
		}
		res, err := w.createAt(ctx, pos, fence.Data, putID+"-fence")
		if err != nil {
			return Deletion{}, false, fmt.Errorf("delete shard %q: fence the log: %w", shard, err)
		}
		if res.outcome == created {
			break
		}
		if res.found.Epoch > claim.GetEpoch() {
			return Deletion{}, false, nil
		}
		tally(res.found)
	}
	if opts.ExpectedLastSeq != nil && *opts.ExpectedLastSeq != lastSeq {
		// The claim and the fence stay: the next writer claims after them
		// and moves past the fence; nothing was deleted.
		return Deletion{}, true, &SeqMismatchError{Shard: shard, Expected: *opts.ExpectedLastSeq, LastSeq: lastSeq}
	}
	base := proto.CloneOf(claim)
	base.NextSeq = lastSeq + 1
	base.RecordCount = records
	next := tombstoneOf(base, putID, opts.Clock.Now())
	next.LogCheckpoint = pos // through the fence
	data, err = format.EncodeManifest(next)
	if err != nil {
		return Deletion{}, false, err
	}
	_, err = store.Put(ctx, name, data, blob.PutOptions{IfMatch: attrs.ETag, PutID: putID})
	if err == nil {
		return deletion(next, false), true, nil
	}
	// The tombstone may have landed, and a writer of the next incarnation
	// may have claimed over it before any read: the manifest's
	// deleted_through_epoch decides, not its commit id.
	unsure.m = next
	if errors.Is(err, blob.ErrConditionFailed) || shardlog.Retryable(err) {
		return Deletion{}, false, nil // Delete's next read decides
	}
	if m, _, rerr := shardlog.ReadManifest(ctx, store, shard); rerr == nil {
		if mine, derr := unsure.decide(shard, m); derr != nil {
			return Deletion{}, true, derr
		} else if mine != nil {
			return deletion(mine, false), true, nil
		}
	}
	return Deletion{}, false, fmt.Errorf("delete shard %q: write tombstone: %w", shard, err)
}

// unclearTombstone is the v2 tombstone a Delete wrote last without
// learning whether it landed (m, nil when none). A read of the manifest
// decides it by deleted_through_epoch, which every later manifest carries
// (the next incarnation's included) and only a tombstone raises: it names
// the tombstone's epoch, and that epoch, one past the deleter's own claim,
// can be no other deleter's.
type unclearTombstone struct{ m *storagepb.Manifest }

// decide returns the tombstone if cur shows that it landed. If cur shows
// that it did not, it is forgotten: its CAS named the deleter's claim,
// which cur has replaced (or still is). If a later tombstone has replaced
// it, whether it landed is no longer known: ErrOutcomeUnknown.
func (u *unclearTombstone) decide(shard string, cur *storagepb.Manifest) (*storagepb.Manifest, error) {
	if u.m == nil {
		return nil, nil
	}
	epoch, through := u.m.GetEpoch(), cur.GetDeletedThroughEpoch()
	switch {
	case through == epoch:
		return u.m, nil
	case through < epoch:
		u.m = nil
		return nil, nil
	}
	return nil, fmt.Errorf("delete shard %q: %w: its tombstone (epoch %d) may have landed before another delete's (epoch %d)", shard, ErrOutcomeUnknown, epoch, through)
}

// wrap marks err, which ends a Delete, as ErrOutcomeUnknown while a
// tombstone of it is undecided.
func (u *unclearTombstone) wrap(err error) error {
	if u.m == nil || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return fmt.Errorf("%w (its tombstone may have been written: %w)", err, ErrOutcomeUnknown)
}
