package shard

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// maxDeletesPerPass bounds one GC pass's cost.
const maxDeletesPerPass = 256

// gcDeleteParallelism bounds the deletes of one pass in flight.
const gcDeleteParallelism = 8

// parallelism is how many deletes GC keeps in flight to delete due
// generations within half of interval, given the recent delete latency:
// one unless the backlog needs more. A burst of parallel deletes would sit
// in front of the appends' requests for no gain while one at a time keeps
// up; on Azurite, which serves one request at a time, eight in flight
// cost a lone client about a tenth of its append latency (measured with
// rolloutbench target 1).
func parallelism(due int, latency, interval time.Duration) int {
	budget := interval / 2
	if due == 0 || latency <= 0 || budget <= 0 {
		return 1
	}
	need := (time.Duration(due)*latency + budget - 1) / budget
	return int(min(max(need, 1), gcDeleteParallelism))
}

// collector deletes blobs that no manifest will ever reference again. It
// never acts on a local belief that a write failed, only on the manifest:
//
//   - Retired generations (replaced by a merge or a fold) are deleted once RetireGrace
//     has passed since their retirement, because a reader may still hold the
//     manifest that listed them; the manifest forgets them only after the
//     delete, in a later CAS. Pending deletes therefore live in the
//     manifest, and an Abort loses none of them.
//   - Orphans are decided by name: a generation of an epoch below the
//     manifest's that the manifest neither lists nor retires. Its writer can
//     never commit again (its CAS names a manifest version that is gone), so
//     nothing can ever reference it. Generations of the current epoch are
//     never treated as orphans: they may be in flight.
//
// Fencing depends on the manifest alone, and GC never deletes the manifest.
//
// Under protocol v2 the retired list also names log positions (epoch 0),
// which a checkpoint covered before a merge retired them; fences are never
// listed, never retired, never deleted. Retired positions are deleted in
// parallel chunks, not strictly in position order: a reader that finds a
// position missing confirms with a manifest read sent after its probe, and
// any collected position is at or below a durable checkpoint, so the
// reader starts again from that checkpoint whatever the order of deletion.
type collector struct {
	w        *writer
	done     chan struct{} // closed when it has exited
	nextScan time.Time     // only the collector goroutine touches it

	// mu guards latency, which a pass's deletes update in parallel.
	mu      sync.Mutex
	latency time.Duration // moving average of one delete's latency
}

// loop is the collector goroutine. It runs beside the merger, so that
// deleting a backlog of retired generations never holds merging up. It
// wakes every MergeInterval, not after each merge: deleting what fell due
// in one pass costs the store the same deletes but one manifest edit. The
// pass keeps only as many deletes in flight as it needs to finish within
// half an interval (parallelism), so a lone client's appends meet at
// most one delete rather than a burst; on a store whose deletes cost less
// issued together (blob.ManyDeleter: the local store, where a pass's
// removals share one directory fsync), it issues the pass in one call.
func (c *collector) loop() {
	w := c.w
	defer close(c.done)
	c.nextScan = w.opts.Clock.Now().Add(w.opts.MergeInterval)
	for {
		select {
		case <-w.background.Done():
			return
		case <-w.opts.Clock.After(w.opts.MergeInterval):
		}
		for c.run(w.background) && w.background.Err() == nil {
		}
	}
}

func (c *collector) observe(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latency == 0 {
		c.latency = d
		return
	}
	c.latency += (d - c.latency) / 8
}

// paceEvery is how many deletes go out between two looks at how many may
// be in flight, so that the first look, made before any delete was timed,
// does not set the pace of a whole pass.
const paceEvery = 32

// run is one GC pass. It reports whether it stopped at maxDeletesPerPass
// with more retired generations due.
func (c *collector) run(ctx context.Context) (more bool) {
	w := c.w
	m := w.manifest()
	now := w.opts.Clock.Now()
	due, backlog := dueRetired(m, now.UnixNano(), int64(w.opts.RetireGrace), maxDeletesPerPass)
	more = backlog > len(due)
	var forget map[format.GenKey]bool
	if many, ok := w.store.(blob.ManyDeleter); ok {
		forget = c.deleteTogether(ctx, many, due)
	} else {
		forget = c.deletePaced(ctx, due, backlog)
	}
	if len(forget) > 0 {
		e := newEdit()
		e.forget = forget
		if err := w.submit(ctx, e); err != nil {
			if ctx.Err() == nil {
				w.log.Warn("gc: forgetting deleted generations failed; will retry", zap.Error(err))
			}
			more = false // the next pass would only repeat this one
		}
		w.gcDeleted.Add(int64(len(forget)))
	} else {
		more = false // every delete failed: wait for the next interval
	}
	if now.Before(c.nextScan) {
		return more
	}
	c.nextScan = now.Add(w.opts.OrphanScanInterval)
	w.gcDeleted.Add(int64(c.orphans(ctx)))
	return more
}

// deleteTogether deletes due in one call to a store whose deletes cost
// less issued together (the local store: one directory fsync for the
// pass, not one per position), and returns those deleted or found gone.
func (c *collector) deleteTogether(ctx context.Context, many blob.ManyDeleter, due []format.GenKey) map[format.GenKey]bool {
	w := c.w
	names := make([]string, len(due))
	for i, k := range due {
		names[i] = k.Blob(w.shard)
	}
	forget := map[format.GenKey]bool{}
	for i, err := range many.DeleteMany(ctx, names) {
		if err != nil && !errors.Is(err, blob.ErrNotFound) {
			if ctx.Err() == nil {
				w.log.Warn("gc: delete retired generation failed; will retry", zap.Uint64("generation", due[i].Number), zap.Error(err))
			}
			continue
		}
		forget[due[i]] = true
	}
	return forget
}

// deletePaced deletes due with as many deletes in flight as it takes to
// keep up, and no more (see parallelism), and returns those deleted or
// found gone. backlog counts due and what is due beyond it.
func (c *collector) deletePaced(ctx context.Context, due []format.GenKey, backlog int) map[format.GenKey]bool {
	w := c.w
	var (
		mu     sync.Mutex
		forget = map[format.GenKey]bool{}
	)
	for len(due) > 0 {
		c.mu.Lock()
		lat := c.latency
		c.mu.Unlock()
		var g errgroup.Group
		g.SetLimit(parallelism(backlog, lat, w.opts.MergeInterval))
		chunk := due[:min(len(due), paceEvery)]
		due, backlog = due[len(chunk):], backlog-len(chunk)
		for _, k := range chunk {
			g.Go(func() error {
				name := k.Blob(w.shard)
				start := w.opts.Clock.Now()
				err := w.store.Delete(ctx, name, blob.DeleteOptions{})
				if err == nil || errors.Is(err, blob.ErrNotFound) {
					// Failures, often fast, would make deletes look cheaper.
					c.observe(w.opts.Clock.Now().Sub(start))
				}
				if err != nil && !errors.Is(err, blob.ErrNotFound) {
					if ctx.Err() == nil {
						w.log.Warn("gc: delete retired generation failed; will retry", zap.Uint64("generation", k.Number), zap.Error(err))
					}
					return nil
				}
				mu.Lock()
				forget[k] = true
				mu.Unlock()
				return nil
			})
		}
		_ = g.Wait()
	}
	return forget
}

// orphans lists the shard's generation blobs and deletes those of earlier
// epochs that the manifest does not reference. It returns how many it
// deleted.
func (c *collector) orphans(ctx context.Context) int {
	w := c.w
	m := w.manifest()
	referenced := map[format.GenKey]bool{}
	for _, g := range m.GetGenerations() {
		referenced[format.KeyOf(g)] = true
	}
	eachRetired(m, func(k format.GenKey, _ int64) bool {
		referenced[k] = true
		return true
	})
	deleted := 0
	token := ""
	for {
		page, err := w.store.List(ctx, blob.ListOptions{Prefix: format.GenerationPrefix(w.shard), Token: token, Max: 1000})
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("gc: list generations failed", zap.Error(err))
			}
			return deleted
		}
		for _, it := range page.Items {
			epoch, gen, ok := format.ParseGenerationName(w.shard, it.Name)
			if !ok || epoch >= m.GetEpoch() || referenced[format.GenKey{Epoch: epoch, Number: gen}] {
				continue
			}
			if err := w.store.Delete(ctx, it.Name, blob.DeleteOptions{}); err != nil && !errors.Is(err, blob.ErrNotFound) {
				w.log.Warn("gc: delete orphan failed", zap.String("blob", it.Name), zap.Error(err))
				continue
			}
			w.log.Info("gc: deleted orphan generation", zap.Uint64("orphan_epoch", epoch), zap.Uint64("generation", gen))
			if deleted++; deleted == maxDeletesPerPass {
				return deleted
			}
		}
		if page.Next == "" {
			return deleted
		}
		token = page.Next
	}
}
