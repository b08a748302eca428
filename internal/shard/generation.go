package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// writeGeneration finishes b as generation gen of this writer's epoch and
// writes it, create-only. It caches the new generation's index, id filter
// and, when small, its bytes, so that appends, reads and merges of it start
// from memory, and returns the manifest's entry for it: records first to
// last, at level, created at created (Unix nanoseconds).
//
// A commit and a merge write their generations through it alike.
func (w *writer) writeGeneration(ctx context.Context, gen uint64, b *format.GenerationBuilder, first, last uint64, level uint32, created int64) (*storagepb.Generation, error) {
	l, err := b.Finish()
	if err != nil {
		return nil, err
	}
	name := format.GenerationName(w.shard, w.epoch, gen)
	if err := w.putWithRetry(ctx, name, l.Data, blob.PutOptions{IfNoneMatch: true, PutID: w.nextPutID()}); err != nil {
		return nil, fmt.Errorf("write generation %s: %w", name, err)
	}
	w.opts.Cache.AddLayout(shardlog.Ref{Shard: w.shard, Key: format.GenKey{Epoch: w.epoch, Number: gen}}, l)
	g := shardlog.LayoutGeneration(l, created)
	g.Number = gen
	g.Epoch = w.epoch
	g.FirstSeq = first
	g.LastSeq = last
	g.Records = uint32(b.Len())
	g.Level = level
	return g, nil
}

// putWithRetry retries a put that failed retryably, with the same put id, so
// a retry of a put that landed reports success.
func (w *writer) putWithRetry(ctx context.Context, name string, data []byte, opts blob.PutOptions) error {
	b := shardlog.NewBackoff(w.opts.Clock, w.opts.RetryBackoff)
	for {
		_, err := w.store.Put(ctx, name, data, opts)
		if err == nil || !shardlog.Retryable(err) {
			return err
		}
		if werr := b.Wait(ctx); werr != nil {
			return fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}

// decodeSource decodes data, the blob of generation g that a merge or a
// fold rewrites, and checks that its footer is the one the manifest lists.
func decodeSource(shard string, g *storagepb.Generation, data []byte) (*storagepb.Footer, error) {
	f, err := format.DecodeGeneration(data)
	if err != nil {
		return nil, err
	}
	return f, matchSource(shard, g, f, data)
}

// cachedSource is decodeSource for data the cache held, with idx, the
// index the cache holds for the same generation. The cache holds a
// generation's bytes only as this process wrote them, or read and
// verified them whole (AddLayout), and an index is the footer of those
// immutable bytes: the footer is taken from it rather than parsed and
// verified again, which cost a merge more than anything else it does.
func cachedSource(shard string, g *storagepb.Generation, data []byte, idx *shardlog.Index) (*storagepb.Footer, error) {
	if idx == nil {
		return decodeSource(shard, g, data)
	}
	return idx.Footer, matchSource(shard, g, idx.Footer, data)
}

// matchSource checks that f, the footer of data, is the one the manifest
// lists as g.
func matchSource(shard string, g *storagepb.Generation, f *storagepb.Footer, data []byte) error {
	if f.GetShard() != shard || f.GetEpoch() != g.GetEpoch() || f.GetGeneration() != g.GetNumber() || f.GetPosition() != g.GetPosition() || len(f.GetEntries()) != int(g.GetRecords()) || uint64(len(data)) != g.GetBytes() {
		return errors.New("footer does not match the manifest")
	}
	return nil
}

// addSources adds the records of the decoded sources to b, in order.
func addSources(b *format.GenerationBuilder, footers []*storagepb.Footer, datas [][]byte) {
	for i, f := range footers {
		for _, e := range f.GetEntries() {
			b.Add(e.GetId(), e.GetSeq(), datas[i][e.GetOffset():e.GetOffset()+uint64(e.GetLength())], e.GetClientHash())
		}
	}
}
