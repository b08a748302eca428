package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/tracing/spans"
)

// opening is one open in flight. Its waiters are pinned on the new writer
// when it is installed, so that an LRU smaller than the number of shards in
// use cannot evict a writer between its open and its first use.
type opening struct {
	done    chan struct{}
	waiters int
	h       *held // set, and pinned once per waiter, when done
	err     error
}

// acquire returns the shard's writer, pinned; the caller must release it.
// It opens the writer when the set holds none, once however many requests
// ask at the same time. It fails with ErrShuttingDown once closeAll began,
// with ctx's error, or with the open's error.
func (s *writerSet) acquire(ctx context.Context, shardName string) (*held, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("shard %q: %w", shardName, ErrShuttingDown)
	}
	var stopped []*held
	if h, ok := s.byShard[shardName]; ok {
		err := h.w.Err()
		if err == nil {
			h.pins++
			victims := s.touchLocked(h)
			s.mu.Unlock()
			s.abort(victims, "evicted")
			return h, nil
		}
		// It stopped since its last use (a checkpoint found it fenced, say):
		// replace it now rather than let a request fail on it first.
		s.retireLocked(h, err)
		if h.pins == 0 {
			s.dropLocked(h)
			stopped = append(stopped, h)
		}
	}
	defer s.abort(stopped, "retired")
	op, ok := s.opening[shardName]
	if !ok {
		if err := s.reopenBackoffLocked(ctx, shardName); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		op = &opening{done: make(chan struct{})}
		s.opening[shardName] = op
		s.opens.Add(1)
		go s.openInBackground(shardName, op, s.openParent(ctx))
	}
	op.waiters++
	s.mu.Unlock()

	select {
	case <-op.done:
		if op.err != nil {
			return nil, op.err
		}
		return op.h, nil // pinned for this waiter by install
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-op.done:
		// Installed meanwhile, with a pin for this waiter: give it back.
		s.mu.Unlock()
		if op.err == nil {
			s.release(op.h)
		}
	default:
		op.waiters--
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("shard %q: waiting for its writer to open: %w", shardName, ctx.Err())
}

// openInBackground opens a writer for shardName, detached from the requests
// waiting for it: a request that gives up does not fail the others, and a
// writer opened after every waiter left still serves the next request.
func (s *writerSet) openInBackground(shardName string, op *opening, parent trace.Span) {
	defer s.opens.Done()
	s.mu.Lock()
	var at time.Time
	if r := s.failing[shardName]; r != nil {
		at = r.at
	}
	s.mu.Unlock()
	if d := time.Until(at); d > 0 {
		// Real time, like at: the backoff paces I/O, not the test clock.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.ctx.Done():
		}
		t.Stop()
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.openTimeout)
	ctx, span := s.startOpen(ctx, parent, shardName)
	start := time.Now()
	w, err := s.safeOpen(ctx, shardName)
	spans.End(span, err)
	cancel()
	s.metrics.writerOpens.Inc()
	s.metrics.openDuration.Observe(time.Since(start).Seconds())

	s.mu.Lock()
	delete(s.opening, shardName)
	var victims []*held
	switch {
	case s.closed:
		// closeAll cancelled this open, or it finished too late.
		op.err = fmt.Errorf("shard %q: %w", shardName, ErrShuttingDown)
	case err != nil:
		if errors.Is(err, blob.ErrOutcomeUnknown) {
			// An unclear epoch claim says nothing about the appends
			// waiting for the writer: none of them was queued.
			err = fmt.Errorf("%w (last try: %v)", blob.ErrUnavailable, err)
		}
		op.err = fmt.Errorf("open writer: %w", err)
		s.openFailedLocked(shardName, op.err)
	default:
		if r := s.failing[shardName]; r != nil {
			delete(s.failing, shardName)
			s.log.Info("shard writer opened after failed opens", zap.String("shard", shardName),
				zap.Uint64("epoch", w.Epoch()), zap.Int("failed_opens", r.fails))
		}
		h := &held{shard: shardName, w: w, pins: op.waiters}
		s.byShard[shardName] = h
		s.all[h] = struct{}{}
		victims = s.touchLocked(h)
		op.h = h
	}
	close(op.done)
	s.mu.Unlock()
	if err == nil && op.err != nil {
		w.Abort() // opened after closeAll began
	}
	s.abort(victims, "evicted")
}

// safeOpen calls open, turning a panic into an error: the open runs on its
// own goroutine, where no interceptor would recover it.
func (s *writerSet) safeOpen(ctx context.Context, shardName string) (w *shard.Writer, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.Inc()
			s.log.Error("opening a writer panicked", zap.String("shard", shardName), zap.Any("panic", p), zap.Stack("stack"))
			w, err = nil, fmt.Errorf("shard %q: opening its writer panicked (the server logged it): %v", shardName, p)
		}
	}()
	return s.open(ctx, shardName)
}
