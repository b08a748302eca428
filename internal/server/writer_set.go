package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// ErrShuttingDown: the server is stopping and takes no new appends.
var ErrShuttingDown = errors.New("server shutting down")

// openFunc opens the resident writer of one shard.
type openFunc func(ctx context.Context, shardName string) (*shard.Writer, error)

// appendRetry is how append retries on a replacement writer: at most
// attempts tries, spaced by a jittered delay that starts at backoff and
// doubles.
type appendRetry struct {
	attempts int
	backoff  time.Duration
}

// writerSet holds this instance's resident shard writers: at most one per
// shard, the least recently used evicted past a bound, and none aborted while
// a request uses it.
//
// One mutex guards the map, the LRU and the pin counts together. The LRU is
// golang-lru's simplelru, which has no lock and no callbacks of its own; the
// set evicts explicitly, under its mutex, and calls Abort only after releasing
// it.
//
// A writer is pinned while a request uses it. Eviction of a pinned writer is
// deferred to its last unpin: until then it stays in byShard (not in the LRU),
// and new requests for its shard reuse it, which makes it resident again. This
// instance therefore never opens a second writer for a shard it holds, which
// would fence the first.
//
// A writer that stopped for good, whatever its lasting error (fenced,
// aborted or closed under a request, stale, or stopped by a create left
// undecided), is retired: it leaves byShard at once, so the next request
// opens a replacement, and it is aborted at its last unpin. A writer that
// stopped with a create in doubt tells the replacement so through
// shard.Lineage, and the replacement fences the log.
//
// A shard whose opens keep failing (a partition of its store) backs off:
// each failed open in a row doubles the wait before the next one, up to
// maxReopenBackoff, so that no stream of appends turns into a loop of
// claims and probes against a failing store. An append that cannot wait
// that long within its deadline is refused at once (reopenBackoff).
type writerSet struct {
	open        openFunc
	openTimeout time.Duration
	retry       appendRetry
	log         *zap.Logger
	metrics     *Metrics
	clock       clock.Clock // times retry pauses; the server sets its Config.Clock
	// tracer, when set, gives an open a shard.open span under the span of
	// the request that started it (tracing.go); nil: no tracing.
	tracer trace.Tracer

	ctx    context.Context // bounds background opens; cancelled by closeAll
	cancel context.CancelFunc
	opens  sync.WaitGroup // background opens in flight

	mu      sync.Mutex
	lru     *simplelru.LRU[string, *held] // resident writers
	max     int
	byShard map[string]*held    // the writer handed out for each shard
	all     map[*held]struct{}  // every writer not yet aborted or closed
	opening map[string]*opening // single-flight opens, by shard
	failing map[string]*reopen  // shards whose last open failed
	closed  bool
}

// held is one writer of the set.
type held struct {
	shard    string
	w        *shard.Writer
	pins     int
	resident bool // in the LRU
	dead     bool // retired: never handed out again
}

func newWriterSet(maxWriters int, open openFunc, openTimeout time.Duration, retry appendRetry, log *zap.Logger, m *Metrics) *writerSet {
	lru, err := simplelru.NewLRU[string, *held](maxWriters, nil)
	if err != nil {
		panic(fmt.Sprintf("writer set: %v", err)) // only for maxWriters < 1, which Config.validate rejects
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &writerSet{
		open:        open,
		openTimeout: openTimeout,
		retry:       retry,
		log:         log,
		metrics:     m,
		ctx:         ctx,
		cancel:      cancel,
		lru:         lru,
		max:         maxWriters,
		byShard:     map[string]*held{},
		all:         map[*held]struct{}{},
		opening:     map[string]*opening{},
		failing:     map[string]*reopen{},
		clock:       clock.Real{},
	}
}

// append appends entries to the shard's writer. A writer that failed for
// good under the request (fenced by another instance's epoch, closed,
// aborted, or stale) is retired and the append retried on its replacement,
// with a few jittered attempts within ctx. Retrying cannot duplicate
// anything, since entries keep their ids across tries. A failed try may
// still have stored some of the entries (then its error also matches
// shard.ErrOutcomeUnknown, as when an append's own records committed and a
// record it shared with another did not), and the answer of the last try
// never hides that.
func (s *writerSet) append(ctx context.Context, shardName string, entries []shard.Entry) ([]shard.Result, error) {
	// landed is the error of an earlier try that may have been stored in
	// part or whole: the final answer must not say less.
	var landed error
	fail := func(err error) ([]shard.Result, error) {
		if landed != nil && !errors.Is(err, shard.ErrOutcomeUnknown) {
			err = fmt.Errorf("%w; an earlier try may have been stored: %w", err, landed)
		}
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		h, err := s.acquire(ctx, shardName)
		if err != nil {
			return fail(err)
		}
		results, err := h.w.Append(ctx, entries)
		if err == nil {
			s.release(h)
			if attempt > 1 {
				s.metrics.selfHeals.Inc()
			}
			return results, nil
		}
		if errors.Is(err, shard.ErrOutcomeUnknown) {
			landed = err
		}
		// A writer that stopped, whatever its lasting error, serves no
		// one again: replace it. Retrying on the replacement settles an
		// append whose create was left in doubt too, since it keeps its
		// ids: the replacement fences the log and inherits what landed.
		replace := ctx.Err() == nil && (errors.Is(err, shard.ErrFenced) || errors.Is(err, shard.ErrClosed) ||
			errors.Is(err, shard.ErrAborted) || errors.Is(err, shard.ErrStale) || h.w.Err() != nil)
		if replace {
			s.retire(h, err)
		}
		s.release(h)
		if !replace {
			return fail(err)
		}
		if attempt == s.retry.attempts || !s.pause(ctx, attempt) {
			var fenced *shard.FencedError
			if errors.As(err, &fenced) {
				return fail(fmt.Errorf("still fenced after %d attempts (another instance keeps claiming this shard): %w", attempt, err))
			}
			return fail(fmt.Errorf("writer failed on %d attempts: %w", attempt, err))
		}
	}
}

// pause waits a jittered, growing delay before retry number attempt. It
// reports false, at once, when ctx would end first.
func (s *writerSet) pause(ctx context.Context, attempt int) bool {
	d := s.retry.backoff << (attempt - 1)
	d = d/2 + rand.N(d/2+1)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	select {
	case <-s.clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// touchLocked makes h the most recently used writer, making it resident
// again if it was evicted, and returns the writers that this evicted and
// that no request pins. The caller aborts them after unlocking.
func (s *writerSet) touchLocked(h *held) (victims []*held) {
	if h.resident {
		s.lru.Get(h.shard)
		return nil
	}
	for s.lru.Len() >= s.max {
		_, v, _ := s.lru.RemoveOldest()
		v.resident = false
		s.metrics.evictions.Inc()
		if v.pins == 0 {
			s.dropLocked(v)
			victims = append(victims, v)
		}
	}
	s.lru.Add(h.shard, h)
	h.resident = true
	s.metrics.residentWriters.Set(float64(len(s.all)))
	return victims
}

// dropLocked forgets v, which no request pins, so it can be aborted.
func (s *writerSet) dropLocked(v *held) {
	if s.byShard[v.shard] == v {
		delete(s.byShard, v.shard)
	}
	delete(s.all, v)
	s.metrics.residentWriters.Set(float64(len(s.all)))
}

// release unpins h. At its last unpin a writer that was evicted or retired
// meanwhile is aborted; nothing is queued on it then, because every append
// holds a pin.
func (s *writerSet) release(h *held) {
	s.mu.Lock()
	h.pins--
	if h.pins > 0 || (h.resident && !h.dead) || s.closed {
		// Still in use, still resident, or closeAll owns it now.
		s.mu.Unlock()
		return
	}
	s.dropLocked(h)
	why := "evicted"
	if h.dead {
		why = "retired"
	}
	s.mu.Unlock()
	s.abort([]*held{h}, why)
}

// retire marks h dead because it failed for good with cause, so that the
// next acquire opens a replacement. The caller must hold a pin on h; h is
// aborted at its last unpin. It reports whether this call retired h: of many
// requests that failed together on one writer, exactly one does, so a fenced
// writer is replaced once per (shard, epoch), not once per request.
func (s *writerSet) retire(h *held, cause error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retireLocked(h, cause)
}

// retireLocked is retire, for a caller that holds mu. It aborts nothing:
// h is aborted at its last unpin, or by the caller when nothing pins it.
func (s *writerSet) retireLocked(h *held, cause error) bool {
	if h.dead {
		return false
	}
	h.dead = true
	if s.byShard[h.shard] == h {
		delete(s.byShard, h.shard)
	}
	if h.resident {
		s.lru.Remove(h.shard)
		h.resident = false
	}
	var fenced *shard.FencedError
	if errors.As(cause, &fenced) {
		s.metrics.fences.Inc()
		s.log.Warn("replacing fenced writer", zap.String("shard", h.shard),
			zap.Uint64("epoch", fenced.Local), zap.Uint64("stored_epoch", fenced.Stored))
	} else {
		s.log.Warn("replacing failed writer", zap.String("shard", h.shard),
			zap.Uint64("epoch", h.w.Epoch()), zap.Error(cause))
	}
	return true
}

// abort aborts writers that the set no longer holds.
func (s *writerSet) abort(hs []*held, why string) {
	for _, h := range hs {
		h.w.Abort()
		s.log.Info("writer "+why, zap.String("shard", h.shard), zap.Uint64("epoch", h.w.Epoch()))
	}
}

// resident returns the number of writers the set holds, resident or
// evicted but pinned.
func (s *writerSet) resident() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}

// queuedBytes sums the bytes queued on every writer the set holds.
func (s *writerSet) queuedBytes() int64 {
	s.mu.Lock()
	ws := make([]*shard.Writer, 0, len(s.all))
	for h := range s.all {
		ws = append(ws, h.w)
	}
	s.mu.Unlock()
	var n int64
	for _, w := range ws {
		n += w.QueuedBytes()
	}
	return n
}

// generations reports the live generations of the set's writers: the most
// any one shard has, and the total. A growing maximum is a merge backlog.
func (s *writerSet) generations() (most, total int) {
	s.mu.Lock()
	ws := make([]*shard.Writer, 0, len(s.all))
	for h := range s.all {
		ws = append(ws, h.w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		g := w.Stats().Generations
		most = max(most, g)
		total += g
	}
	return most, total
}

// closeAll stops the set: later acquires fail with ErrShuttingDown, opens in
// flight are cancelled, and every writer is closed gracefully (committing
// what is queued) in parallel, bounded by ctx. A writer whose Close does not
// finish in time is aborted by Close itself. It returns how many writers
// closed cleanly and how many did not.
func (s *writerSet) closeAll(ctx context.Context) (closed, failed int) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, 0
	}
	s.closed = true
	s.cancel()
	hs := make([]*held, 0, len(s.all))
	for h := range s.all {
		hs = append(hs, h)
	}
	s.lru.Purge()
	clear(s.byShard)
	clear(s.all)
	s.metrics.residentWriters.Set(0)
	s.mu.Unlock()
	s.opens.Wait()

	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() { errs[i] = h.w.Close(ctx) })
	}
	wg.Wait()
	// Requests still in flight may retire a writer meanwhile: read whether
	// one was under the lock.
	s.mu.Lock()
	dead := make([]bool, len(hs))
	for i, h := range hs {
		dead[i] = h.dead
	}
	s.mu.Unlock()
	for i, h := range hs {
		fields := []zap.Field{zap.String("shard", h.shard), zap.Uint64("epoch", h.w.Epoch())}
		switch err := errs[i]; {
		case err == nil:
			closed++
		case errors.Is(err, shard.ErrFenced):
			// Another instance holds the shard. The fence already failed
			// whatever was queued, so nothing is discarded here.
			closed++
			if !dead[i] {
				s.log.Info("writer was fenced by another instance; closed", append(fields, zap.Error(err))...)
			}
		default:
			failed++
			s.log.Warn("writer did not close cleanly; un-acknowledged appends were discarded", append(fields, zap.Error(err))...)
		}
	}
	return closed, failed
}
