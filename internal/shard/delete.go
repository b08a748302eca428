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
		d, done, err := deleteLog(ctx, store, shard, opts, cur, etag, putID, &unsure)
		if done || err != nil {
			return d, err
		}
		// Another claim got in first: look again.
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

// deleteLog deletes the shard whose manifest cur (ETag etag) it read. The
// tombstone must also fence the log, and the expected last seq is checked
// against the log's tail up to that fence: so it claims the shard as a
// writer does (a CAS to the next epoch, which converts a v1 shard), probes
// the log, fences it at the first free position, and only then writes the
// tombstone, a CAS on its claim that checkpoints through the fence. A
// writer of the old incarnation is fenced by the claim's ETag and by the
// fence in the log. done is false when another claim got in first.
func deleteLog(ctx context.Context, store blob.Store, shard string, opts DeleteOptions, cur *storagepb.Manifest, etag blob.ETag, putID string, unsure *unclearTombstone) (_ Deletion, done bool, _ error) {
	if opts.ExpectedLastSeq != nil {
		// Seqs only grow: a tail already past the expected seq refuses the
		// delete without claiming (and fencing) the live writer.
		if err := checkTailBelow(ctx, store, shard, cur, *opts.ExpectedLastSeq); err != nil {
			return Deletion{}, true, err
		}
	}
	claim, claimETag, ok, err := claimForDelete(ctx, store, shard, cur, etag, putID)
	if !ok || err != nil {
		return Deletion{}, false, err
	}
	t, ok, err := fenceForDelete(ctx, store, shard, opts, cur, claim.GetEpoch(), putID)
	if !ok || err != nil {
		return Deletion{}, false, err
	}
	if opts.ExpectedLastSeq != nil && *opts.ExpectedLastSeq != t.lastSeq {
		// The claim and the fence stay: the next writer claims after them
		// and moves past the fence; nothing was deleted.
		return Deletion{}, true, &SeqMismatchError{Shard: shard, Expected: *opts.ExpectedLastSeq, LastSeq: t.lastSeq}
	}
	return writeTombstone(ctx, store, shard, opts, claim, claimETag, t, putID, unsure)
}

// checkTailBelow fails with a *SeqMismatchError when the log's tail after
// cur's checkpoint already holds a seq past expected.
func checkTailBelow(ctx context.Context, store blob.Store, shard string, cur *storagepb.Manifest, expected uint64) error {
	found, err := shardlog.NewSource(store, NewBlobCache(1<<20), shard).Probe(ctx, cur.GetLogCheckpoint()+1, 0)
	if err != nil {
		return fmt.Errorf("delete shard %q: probe the log: %w", shard, err)
	}
	last := cur.GetNextSeq() - 1
	for _, e := range found {
		last = max(last, e.NextSeq-1)
	}
	if last > expected {
		return &SeqMismatchError{Shard: shard, Expected: expected, LastSeq: last}
	}
	return nil
}

// claimForDelete claims the next epoch of cur for the delete. ok is false
// when another claim got in first.
func claimForDelete(ctx context.Context, store blob.Store, shard string, cur *storagepb.Manifest, etag blob.ETag, putID string) (_ *storagepb.Manifest, _ blob.ETag, ok bool, _ error) {
	claim := proto.CloneOf(cur)
	// The claim converts a v1 shard, as a writer's does (epoch.go).
	claim.Protocol = format.ProtocolV2
	claim.Epoch = cur.GetEpoch() + 1
	claim.Owner = putID
	claim.CommitId = putID + "-claim"
	claim.Epochs = append(claim.Epochs, &storagepb.EpochRecord{Epoch: claim.GetEpoch()})
	pruneEpochs(claim, DefaultMaxEpochRecords)
	data, err := format.EncodeManifest(claim)
	if err != nil {
		return nil, "", false, err
	}
	attrs, err := store.Put(ctx, format.ManifestName(shard), data, blob.PutOptions{IfMatch: etag, PutID: claim.GetCommitId()})
	if err != nil {
		m, metag, rerr := shardlog.ReadManifest(ctx, store, shard)
		if rerr != nil || m.GetCommitId() != claim.GetCommitId() {
			if errors.Is(err, blob.ErrConditionFailed) || shardlog.Retryable(err) {
				return nil, "", false, nil
			}
			return nil, "", false, fmt.Errorf("delete shard %q: claim: %w", shard, err)
		}
		attrs.ETag = metag
	}
	return claim, attrs.ETag, true, nil
}

// deletedTail is what the log held up to the delete's fence.
type deletedTail struct {
	lastSeq, records uint64
	fence            uint64 // the fence's position
}

// fenceForDelete probes the log after cur's checkpoint and creates the
// delete's fence, under epoch, at the first free position. ok is false
// when a higher epoch got there first.
func fenceForDelete(ctx context.Context, store blob.Store, shard string, opts DeleteOptions, cur *storagepb.Manifest, epoch uint64, putID string) (_ deletedTail, ok bool, _ error) {
	// A writer of the claimed epoch, for the log's fence.
	w := &writer{store: store, shard: shard, epoch: epoch, id: putID,
		opts: Options{Clock: opts.Clock, RetryBackoff: opts.RetryBackoff}.withDefaults()}
	found, err := shardlog.NewSource(store, w.opts.Cache, shard).Probe(ctx, cur.GetLogCheckpoint()+1, 0)
	if err != nil {
		return deletedTail{}, false, fmt.Errorf("delete shard %q: probe the log: %w", shard, err)
	}
	t := deletedTail{lastSeq: cur.GetNextSeq() - 1, records: cur.GetRecordCount(), fence: cur.GetLogCheckpoint() + 1}
	tally := func(e *shardlog.Entry) {
		t.lastSeq = max(t.lastSeq, e.NextSeq-1)
		if e.Gen != nil {
			t.records += uint64(e.Gen.GetRecords())
		}
		t.fence = e.Position + 1
	}
	for _, e := range found {
		if e.Epoch > epoch {
			return deletedTail{}, false, nil
		}
		tally(e)
	}
	for {
		fence, err := format.EncodeFence(format.LogEntry{Shard: shard, Epoch: epoch, Position: t.fence, Writer: putID, PutID: putID + "-fence", NextSeq: t.lastSeq + 1})
		if err != nil {
			return deletedTail{}, false, err
		}
		res, err := w.createAt(ctx, t.fence, fence.Data, putID+"-fence")
		if err != nil {
			return deletedTail{}, false, fmt.Errorf("delete shard %q: fence the log: %w", shard, err)
		}
		if res.outcome == created {
			return t, true, nil
		}
		if res.found.Epoch > epoch {
			return deletedTail{}, false, nil
		}
		tally(res.found)
	}
}

// writeTombstone writes the tombstone over claim (ETag claimETag), a CAS
// that checkpoints through the fence of t.
func writeTombstone(ctx context.Context, store blob.Store, shard string, opts DeleteOptions, claim *storagepb.Manifest, claimETag blob.ETag, t deletedTail, putID string, unsure *unclearTombstone) (_ Deletion, done bool, _ error) {
	base := proto.CloneOf(claim)
	base.NextSeq = t.lastSeq + 1
	base.RecordCount = t.records
	next := tombstoneOf(base, putID, opts.Clock.Now())
	next.LogCheckpoint = t.fence // through the fence
	data, err := format.EncodeManifest(next)
	if err != nil {
		return Deletion{}, false, err
	}
	_, err = store.Put(ctx, format.ManifestName(shard), data, blob.PutOptions{IfMatch: claimETag, PutID: putID})
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

// unclearTombstone is the tombstone a Delete wrote last without
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
