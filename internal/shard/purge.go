package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// purgeParallelism bounds one shard's deletes in flight.
const purgeParallelism = 8

// Purge deletes the shard's generation blobs written under an epoch at or
// below through: those of deleted incarnations (Deletion.ThroughEpoch, or
// the manifest's deleted_through_epoch). The next incarnation's writers
// claim epochs above the tombstone's, so none of their blobs is touched;
// the manifest, which fences every old writer, is never deleted. Purge is
// idempotent, and resumable after any interruption: it decides by name
// alone. progress, if not nil, is called after each blob deleted. It
// returns how many blobs it deleted.
func Purge(ctx context.Context, store blob.Store, shard string, through uint64, progress func()) (int, error) {
	prefix := format.GenerationPrefix(shard)
	var (
		mu      sync.Mutex
		deleted int
		token   string
	)
	for {
		page, err := store.List(ctx, blob.ListOptions{Prefix: prefix, Token: token, Max: 1000})
		if err != nil {
			return deleted, fmt.Errorf("purge shard %q: list generations: %w", shard, err)
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(purgeParallelism)
		past := false
		for _, it := range page.Items {
			epoch, _, ok := format.ParseGenerationName(shard, it.Name)
			if !ok {
				continue
			}
			if epoch > through {
				// Names list in (epoch, generation) order: the rest
				// belong to live incarnations.
				past = true
				break
			}
			g.Go(func() error {
				err := store.Delete(gctx, it.Name, blob.DeleteOptions{})
				if err != nil && !errors.Is(err, blob.ErrNotFound) {
					return fmt.Errorf("purge shard %q: delete %s: %w", shard, it.Name, err)
				}
				mu.Lock()
				deleted++
				mu.Unlock()
				if progress != nil {
					progress()
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return deleted, err
		}
		if past || page.Next == "" {
			n, err := purgeLog(ctx, store, shard, through, progress)
			return deleted + n, err
		}
		token = page.Next
	}
}

// Purger runs Purge in the background, never on an Append's path. It owns
// its goroutines: Close cancels them and waits. A purge that fails, or is
// cut short by Close, is finished by the next DeleteShard of the shard or
// by rolloutd admin purge, since Purge decides by name alone.
type Purger struct {
	store blob.Store
	log   *zap.Logger
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	slots chan struct{} // bounds the shards purged at once

	mu      sync.Mutex
	running map[string]uint64 // shard -> through epoch of the purge in flight
	again   map[string]uint64 // a later request for a shard being purged
	closed  bool
}

// NewPurger returns a Purger that purges up to parallel shards at once.
func NewPurger(store blob.Store, parallel int, log *zap.Logger) *Purger {
	if log == nil {
		log = zap.NewNop()
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Purger{store: store, log: log, ctx: ctx, stop: stop, slots: make(chan struct{}, max(parallel, 1)),
		running: map[string]uint64{}, again: map[string]uint64{}}
}

// Start purges the shard through epoch in the background, unless a purge
// of it is running: then that one runs again when it is done.
func (p *Purger) Start(shard string, through uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if _, busy := p.running[shard]; busy {
		p.again[shard] = max(p.again[shard], through)
		return
	}
	p.running[shard] = through
	p.wg.Go(func() { p.run(shard, through) })
}

func (p *Purger) run(shard string, through uint64) {
	for {
		select {
		case p.slots <- struct{}{}:
		case <-p.ctx.Done():
			p.finish(shard)
			return
		}
		start := time.Now()
		n, err := Purge(p.ctx, p.store, shard, through, nil)
		<-p.slots
		if err != nil && p.ctx.Err() == nil {
			p.log.Warn("purge of a deleted shard failed; DeleteShard again or rolloutd admin purge finishes it",
				zap.String("shard", shard), zap.Uint64("epoch", through), zap.Int("deleted", n), zap.Error(err))
		} else if err == nil {
			p.log.Info("purged a deleted shard", zap.String("shard", shard), zap.Uint64("epoch", through),
				zap.Int("deleted", n), zap.Duration("took", time.Since(start)))
		}
		p.mu.Lock()
		next, more := p.again[shard]
		delete(p.again, shard)
		if !more || p.closed {
			delete(p.running, shard)
			p.mu.Unlock()
			return
		}
		through = max(through, next)
		p.running[shard] = through
		p.mu.Unlock()
	}
}

func (p *Purger) finish(shard string) {
	p.mu.Lock()
	delete(p.running, shard)
	delete(p.again, shard)
	p.mu.Unlock()
}

// Running reports how many shards are being purged.
func (p *Purger) Running() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.running)
}

// Wait waits until no purge is running, or ctx ends.
func (p *Purger) Wait(ctx context.Context) error {
	for p.Running() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Close stops the purges in flight and waits for them to return.
func (p *Purger) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.stop()
	p.wg.Wait()
}

// purgeLog deletes the shard's log batches written under an epoch at or
// below through (deleted incarnations'). Fences are kept: they are what
// stops a stale writer's create from landing in a collected position.
func purgeLog(ctx context.Context, store blob.Store, shard string, through uint64, progress func()) (int, error) {
	cache := NewBlobCache(1 << 20)
	deleted := 0
	token := ""
	for {
		page, err := store.List(ctx, blob.ListOptions{Prefix: format.LogPrefix(shard), Token: token, Max: 1000})
		if err != nil {
			return deleted, fmt.Errorf("purge shard %q: list the log: %w", shard, err)
		}
		for _, it := range page.Items {
			p, ok := format.ParseLogName(shard, it.Name)
			if !ok {
				continue
			}
			e, err := shardlog.NewSource(store, cache, shard).Entry(ctx, p, 0)
			if errors.Is(err, blob.ErrNotFound) {
				continue
			}
			if err != nil {
				return deleted, fmt.Errorf("purge shard %q: %w", shard, err)
			}
			if e.Fence() || e.Epoch > through {
				continue
			}
			if err := store.Delete(ctx, it.Name, blob.DeleteOptions{}); err != nil && !errors.Is(err, blob.ErrNotFound) {
				return deleted, fmt.Errorf("purge shard %q: delete %s: %w", shard, it.Name, err)
			}
			deleted++
			if progress != nil {
				progress()
			}
		}
		if page.Next == "" {
			return deleted, nil
		}
		token = page.Next
	}
}
