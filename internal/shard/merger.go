package shard

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// Merging keeps a long-lived shard's generation count, and so the cost of a
// Get or an id lookup, bounded. It runs in the owning writer under its own
// epoch (it never claims one): the merger goroutine reads the sources and
// writes the merged generation beside the commit path, and only its
// manifest edit joins the committer's next CAS, so appends never wait on it.
//
// The policy that picks what to merge is in policy.go.

// merger is the merger goroutine's state. It reads and writes blobs beside
// the commit path and hands the committer only its manifest edit (edit.go).
// It has no lock: its fields are set by Open and its channels are its only
// state; what it reads of the writer (the manifest, the claims) is under
// writer.mu (state.go) and claims.mu (claims.go).
type merger struct {
	w    *writer
	kick chan struct{} // wakes it after a commit; capacity 1
	done chan struct{} // closed when it has exited
}

// wake tells the merger that a commit changed the manifest, without
// blocking.
func (m *merger) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// mergeReadParallelism bounds the source reads of one merge in flight.
const mergeReadParallelism = 4

// loop is the merger goroutine: it merges while the policy asks for it,
// until Close, a fence or Abort.
func (m *merger) loop() {
	w := m.w
	defer close(m.done)
	for {
		select {
		case <-w.background.Done():
			return
		case <-m.kick:
		case <-w.opts.Clock.After(w.opts.MergeInterval):
		}
		for w.background.Err() == nil {
			plan := pickMerge(w.manifest().GetGenerations(), w.opts.Clock.Now(), w.opts.mergePolicy())
			if plan == nil || !m.claim(plan) {
				break // GC or an edit in flight holds part of it; the next kick looks again
			}
			err := m.merge(w.background, plan)
			m.release(plan)
			if err != nil {
				if w.background.Err() == nil {
					w.log.Warn("merge failed; will retry", zap.Error(err))
				}
				break
			}
		}
	}
}

// merge rewrites plan as one generation and waits until the committer has
// committed (or rejected) the manifest edit that swaps it in.
func (m *merger) merge(ctx context.Context, plan []*storagepb.Generation) error {
	w := m.w
	start := w.opts.Clock.Now()
	var size int
	var level uint32
	for _, g := range plan {
		size += int(g.GetBytes())
		level = max(level, g.GetLevel())
	}
	// Read the sources a few at a time: a merge must keep up with commits.
	datas := make([][]byte, len(plan))
	footers := make([]*storagepb.Footer, len(plan))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(mergeReadParallelism)
	for i, src := range plan {
		g.Go(func() (err error) {
			datas[i], footers[i], err = m.readSource(gctx, src)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	gen := w.allocGen()
	// Claimed until its edit settles, so that no other rewrite takes the
	// output the moment it is swapped in.
	w.claims.add(format.GenKey{Epoch: w.epoch, Number: gen})
	defer w.claims.release(format.GenKey{Epoch: w.epoch, Number: gen})
	b := format.NewGenerationBuilder(w.shard, w.epoch, gen, size)
	addSources(b, footers, datas)
	out, err := w.writeGeneration(ctx, gen, b, plan[0].GetFirstSeq(), plan[len(plan)-1].GetLastSeq(), level+1, w.opts.Clock.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	e := newEdit()
	e.merge = &mergeEdit{output: out}
	for _, g := range plan {
		e.merge.sources = append(e.merge.sources, format.KeyOf(g))
	}
	if err := w.submit(ctx, e); err != nil {
		return fmt.Errorf("merge into generation %d: %w", gen, err)
	}
	took := w.opts.Clock.Now().Sub(start)
	w.merges.Add(1)
	w.mergeNanos.Add(int64(took))
	if w.opts.OnMerge != nil {
		w.opts.OnMerge(len(plan), b.Len(), took)
	}
	w.log.Debug("merged generations", zap.Uint64("generation", gen), zap.Int("sources", len(plan)), zap.Int("records", b.Len()))
	return nil
}

// readSource reads src, a generation a merge rewrites, and its footer:
// from the cache when it holds the bytes (see cachedSource).
func (m *merger) readSource(ctx context.Context, src *storagepb.Generation) ([]byte, *storagepb.Footer, error) {
	w := m.w
	ref := shardlog.RefOf(w.shard, src)
	name := ref.Blob()
	var f *storagepb.Footer
	data, ok := w.opts.Cache.GetData(ref)
	var err error
	if ok {
		idx, _ := w.opts.Cache.GetIndex(ref)
		f, err = cachedSource(w.shard, src, data, idx)
	} else {
		if data, _, err = w.store.Get(ctx, name, blob.GetOptions{}); err != nil {
			return nil, nil, fmt.Errorf("merge: read %s: %w", name, err)
		}
		f, err = decodeSource(w.shard, src, data)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("merge: %w: blob %s: %w", ErrCorrupt, name, err)
	}
	return data, f, nil
}

// claim claims plan for the merger: it fails if a generation of plan
// is claimed already or no longer live.
func (m *merger) claim(plan []*storagepb.Generation) bool {
	w := m.w
	return w.claims.claimLive(plan, w.manifest)
}

// release drops the merger's claim on plan.
func (m *merger) release(plan []*storagepb.Generation) {
	w := m.w
	keys := make([]format.GenKey, len(plan))
	for i, g := range plan {
		keys[i] = format.KeyOf(g)
	}
	w.claims.release(keys...)
}
