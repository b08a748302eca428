package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// claim makes this writer the owner of the next epoch. It loops until its
// conditional write wins or ctx ends; losing to a concurrent claim is normal.
func (w *writer) claim(ctx context.Context) error {
	name := format.ManifestName(w.shard)
	backoff := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	var last error // the last retryable storage error, reported if ctx ends
	fail := func(err error) error {
		if last != nil {
			return fmt.Errorf("open shard %q: %w (last storage error: %w)", w.shard, err, last)
		}
		return fmt.Errorf("open shard %q: %w", w.shard, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		cur, etag, err := shardlog.ReadManifest(ctx, w.store, w.shard)
		var next *storagepb.Manifest
		put := blob.PutOptions{PutID: w.nextPutID()}
		switch {
		case errors.Is(err, blob.ErrNotFound):
			next = &storagepb.Manifest{Epoch: 1, NextGeneration: 1, NextSeq: 1}
			put.IfNoneMatch = true
			cur = nil
			startIncarnation(next, w.opts.Clock.Now()) // lifecycle.go
		case err != nil && shardlog.Retryable(err):
			last = err
			if err := backoff.Wait(ctx); err != nil {
				return fail(err)
			}
			continue
		case err != nil:
			return fmt.Errorf("open shard %q: %w", w.shard, err)
		default:
			next = proto.CloneOf(cur)
			next.Epoch = cur.GetEpoch() + 1
			put.IfMatch = etag
			if next.GetTombstone() != nil {
				startIncarnation(next, w.opts.Clock.Now()) // lifecycle.go
			}
		}
		// Every claim converts a v1 shard: its manifest becomes a
		// checkpoint of the log, which builds before the log refuse.
		next.Protocol = format.ProtocolV2
		next.Owner = w.id
		next.CommitId = put.PutID
		next.UpdatedUnixNanos = w.opts.Clock.Now().UnixNano()
		next.Epochs = append(next.Epochs, &storagepb.EpochRecord{Epoch: next.GetEpoch()})
		pruneEpochs(next, w.opts.MaxEpochRecords)
		data, err := format.EncodeManifest(next)
		if err != nil {
			return err
		}
		attrs, err := w.store.Put(ctx, name, data, put)
		switch {
		case err == nil:
			w.m, w.etag, w.epoch, w.replaced = next, attrs.ETag, next.GetEpoch(), cur
			return nil
		case errors.Is(err, blob.ErrConditionFailed):
			// Another writer claimed first; claim the epoch after it.
		case shardlog.Retryable(err):
			last = err
			// The claim may have landed. Re-reading decides: if it did,
			// the manifest names this writer as owner.
			m, etag, rerr := shardlog.ReadManifest(ctx, w.store, w.shard)
			if rerr == nil && m.GetOwner() == w.id && m.GetEpoch() == next.GetEpoch() {
				w.m, w.etag, w.epoch, w.replaced = m, etag, m.GetEpoch(), cur
				return nil
			}
			if err := backoff.Wait(ctx); err != nil {
				return fail(err)
			}
		default:
			return fmt.Errorf("open shard %q: claim epoch %d: %w", w.shard, next.GetEpoch(), err)
		}
	}
}

// pruneEpochs keeps the newest max epoch records. An older epoch's
// unresolved commit is then undecidable (reported as ErrOutcomeUnknown,
// never as success or fence); it takes max claims by others in the middle of
// one commit to get there.
func pruneEpochs(m *storagepb.Manifest, max int) {
	if n := len(m.Epochs); n > max {
		m.Epochs = append(m.Epochs[:0], m.Epochs[n-max:]...)
	}
}

// nextPutID numbers this writer's next conditional put: its id, a dash and
// a counter, as fmt's "%s-%d" would write them, built in one allocation
// since every commit takes one.
func (w *writer) nextPutID() string {
	var num [20]byte
	var b strings.Builder
	b.Grow(len(w.id) + 1 + len(num))
	b.WriteString(w.id)
	b.WriteByte('-')
	b.Write(strconv.AppendUint(num[:0], w.puts.Add(1), 10))
	return b.String()
}
