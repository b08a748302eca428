package shard

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// attempt is one try at committing a batch: the generation it was written as
// and the results it would produce.
type attempt struct {
	gen     uint64
	results []Result
}

// maxRebases bounds how often one batch is rebuilt on a newer manifest of
// the same epoch before the commit is reported as failed.
const maxRebases = 3

// commitBatch writes the batch as one generation and CASes the manifest to
// add it. It returns the batch's results only once that CAS is known to
// have landed.
func (w *writer) commitBatch(ctx context.Context, batch []*pending) ([]Result, error) {
	var attempts []attempt
	for rebase := 0; ; rebase++ {
		if w.stale {
			if err := w.resync(ctx); err != nil {
				return nil, err
			}
		}
		a, next, err := w.writeGeneration(ctx, batch)
		if err != nil {
			// Nothing of this attempt was committed; earlier attempts were
			// already resolved as not committed.
			if w.ctx.Err() != nil {
				return nil, fmt.Errorf("shard %q epoch %d: %w before the commit was sent; retry with the same ids", w.shard, w.epoch, ErrAborted)
			}
			return nil, err
		}
		attempts = append(attempts, a)
		attrs, err := w.store.Put(ctx, format.ManifestName(w.shard), next.data, blob.PutOptions{IfMatch: w.etag, PutID: next.putID})
		for err != nil && errors.Is(err, blob.ErrUnavailable) {
			// Known not applied: retry the same CAS (same put id).
			if werr := newBackoff(w.opts).wait(ctx); werr != nil {
				break
			}
			attrs, err = w.store.Put(ctx, format.ManifestName(w.shard), next.data, blob.PutOptions{IfMatch: w.etag, PutID: next.putID})
		}
		if err == nil {
			w.m, w.etag = next.m, attrs.ETag
			return a.results, nil
		}
		// The CAS lost, or its outcome is unclear. Only the stored manifest
		// can say which attempt, if any, landed.
		results, err := w.resolve(ctx, attempts, err)
		if err != errRebase {
			return results, err
		}
		if rebase == maxRebases {
			return nil, fmt.Errorf("shard %q epoch %d: manifest kept changing under this writer's own epoch: %w", w.shard, w.epoch, ErrOutcomeUnknown)
		}
	}
}

// errRebase: the manifest proves no attempt landed and this writer still
// owns the shard, so the batch is committed again on the current manifest.
var errRebase = errors.New("rebase")

type nextManifest struct {
	m     *storagepb.Manifest
	data  []byte
	putID string
}

// writeGeneration writes the batch as a new generation blob and prepares the
// manifest that commits it.
func (w *writer) writeGeneration(ctx context.Context, batch []*pending) (attempt, nextManifest, error) {
	cur := w.m
	// A rebased batch never reuses the number of an attempt that failed: its
	// blob may exist, and attempts must stay distinguishable.
	gen := max(cur.GetNextGeneration(), w.minGen)
	w.minGen = gen + 1
	seq := cur.GetNextSeq()
	var size int
	for _, p := range batch {
		size += int(p.bytes) + 16*len(p.entries)
	}
	b := format.NewGenerationBuilder(w.shard, w.epoch, gen, size)
	a := attempt{gen: gen}
	var scratch []byte
	for _, p := range batch {
		for _, e := range p.entries {
			scratch = e.withSeq(scratch[:0], seq)
			b.Add(e.ID, seq, scratch, e.ClientHash)
			a.results = append(a.results, Result{ID: e.ID, Seq: seq, Epoch: w.epoch, Generation: gen})
			seq++
		}
	}
	data, footer, footerOff, footerLen, err := b.Finish()
	if err != nil {
		return a, nextManifest{}, err
	}
	name := format.GenerationName(w.shard, w.epoch, gen)
	if err := w.putWithRetry(ctx, name, data, blob.PutOptions{IfNoneMatch: true, PutID: w.nextPutID()}); err != nil {
		return a, nextManifest{}, fmt.Errorf("shard %q: write generation %s: %w", w.shard, name, err)
	}
	w.opts.Cache.add(name, newIndex(footer))

	now := w.opts.Clock.Now().UnixNano()
	next := proto.CloneOf(cur)
	next.Generations = append(next.Generations, &storagepb.Generation{
		Number:           gen,
		Epoch:            w.epoch,
		FirstSeq:         cur.GetNextSeq(),
		LastSeq:          seq - 1,
		Records:          uint32(len(a.results)),
		Bytes:            uint64(len(data)),
		FooterOffset:     footerOff,
		FooterLength:     footerLen,
		CreatedUnixNanos: now,
	})
	next.NextGeneration = gen + 1
	next.NextSeq = seq
	next.RecordCount += uint64(len(a.results))
	next.UpdatedUnixNanos = now
	next.CommitId = w.nextPutID()
	epochRecord(next, w.epoch).LastGeneration = gen
	enc, err := format.EncodeManifest(next)
	if err != nil {
		return a, nextManifest{}, err
	}
	return a, nextManifest{m: next, data: enc, putID: next.CommitId}, nil
}

// putWithRetry retries a put that failed retryably, with the same put id, so
// a retry of a put that landed reports success.
func (w *writer) putWithRetry(ctx context.Context, name string, data []byte, opts blob.PutOptions) error {
	b := newBackoff(w.opts)
	for {
		_, err := w.store.Put(ctx, name, data, opts)
		if err == nil || !retryable(err) {
			return err
		}
		if werr := b.wait(ctx); werr != nil {
			return fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}

// resolve decides an unclear or lost manifest CAS by re-reading the
// manifest: the batch was committed if any attempt landed; the writer is
// fenced if a higher epoch holds the shard and no attempt landed.
func (w *writer) resolve(ctx context.Context, attempts []attempt, casErr error) ([]Result, error) {
	b := newBackoff(w.opts)
	for {
		if ctx.Err() != nil {
			break
		}
		m, etag, err := readManifest(ctx, w.store, w.shard)
		if err != nil {
			if retryable(err) && b.wait(ctx) == nil {
				continue
			}
			break
		}
		for i := len(attempts) - 1; i >= 0; i-- {
			switch commitStatus(m, w.epoch, attempts[i].gen) {
			case committed:
				if m.GetEpoch() == w.epoch {
					w.m, w.etag, w.stale = m, etag, false
				} else {
					// Committed, then another writer claimed the shard:
					// the ack stands, and the next commit finds the fence.
					w.stale = true
				}
				return attempts[i].results, nil
			case undecidable:
				w.stale = true
				return nil, fmt.Errorf("shard %q: commit of generation %d by epoch %d cannot be decided: epoch records pruned by epoch %d: %w", w.shard, attempts[i].gen, w.epoch, m.GetEpoch(), ErrOutcomeUnknown)
			}
		}
		if m.GetEpoch() != w.epoch {
			return nil, &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
		}
		w.log.Warn("manifest changed under this writer's own epoch; rebasing the commit",
			zap.Uint64("generation", attempts[len(attempts)-1].gen), zap.Error(casErr))
		w.m, w.etag, w.stale = m, etag, false
		return nil, errRebase
	}
	w.stale = true
	if w.ctx.Err() != nil {
		return nil, fmt.Errorf("shard %q epoch %d: aborted while its commit was in flight: %w; retry with the same ids", w.shard, w.epoch, ErrOutcomeUnknown)
	}
	return nil, fmt.Errorf("shard %q epoch %d: manifest CAS failed (%w) and the manifest could not be re-read: %w; retry with the same ids", w.shard, w.epoch, casErr, ErrOutcomeUnknown)
}

// resync re-reads the manifest after an unclear commit.
func (w *writer) resync(ctx context.Context) error {
	m, etag, err := readManifest(ctx, w.store, w.shard)
	if err != nil {
		return fmt.Errorf("shard %q: re-read manifest: %w", w.shard, err)
	}
	if m.GetEpoch() != w.epoch {
		return &FencedError{Shard: w.shard, Local: w.epoch, Stored: m.GetEpoch()}
	}
	w.m, w.etag, w.stale = m, etag, false
	return nil
}
