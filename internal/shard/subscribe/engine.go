package subscribe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/follow"
)

// Errors a subscription starts or ends with, beside validation errors
// (validate.ErrInvalid), storage errors and ctx's.
var (
	// ErrConsumerNotFound: SUBSCRIBE_START_CONSUMER named a consumer that
	// has no stored positions.
	ErrConsumerNotFound = errors.New("consumer not found")
	// ErrConsumersUnavailable: a consumer was named, and the engine has no
	// ConsumerPositions to load it with.
	ErrConsumersUnavailable = errors.New("consumer positions are not available on this server")
	// ErrClosed: the engine was closed.
	ErrClosed = errors.New("subscribe: engine closed")
)

// ConsumerPositions loads a consumer's stored positions (shard -> cursor)
// and generation; found is false for a consumer never committed.
type ConsumerPositions func(ctx context.Context, prefix, name string) (positions map[string]uint64, generation uint64, found bool, err error)

// Options configure an Engine. Zero values take the defaults.
type Options struct {
	// Notifier wakes the readers of shards whose writer is in this
	// process. Nil: the watcher's listing wakes every shard.
	Notifier *shard.Notifier
	// WatchInterval is how often a prefix is listed to find new shards
	// and changed idle ones. Default 5 s.
	WatchInterval time.Duration
	// IdleAfter parks a shard's reader once it has read nothing new for
	// that long (follow.Options.IdleAfter). Default 30 s.
	IdleAfter time.Duration
	// PollMin and PollMax pace a reader that is not parked (defaults as a
	// following Scan's, 50 ms and 2 s).
	PollMin, PollMax time.Duration
	// ReadBytes bounds one ranged read of records. Default 1 MiB.
	ReadBytes int64
	// BufferBytes and BufferRuns bound what a shard's follower buffers
	// from the shared reader before it is dropped to catch up on its own.
	// Defaults 256 KiB and 16.
	BufferBytes int
	BufferRuns  int
	// Slots is how many of one subscription's shards may hold records of
	// their own at once (reading on their own, or building batches).
	// Default 8.
	Slots int
	// DescribeParallelism bounds the reads of a SUBSCRIBE_START_LATEST's
	// starting positions. Default 8.
	DescribeParallelism int
	// ConsumerPositions loads a named consumer's positions; nil refuses
	// subscriptions that name one (ErrConsumersUnavailable).
	ConsumerPositions ConsumerPositions
	Logger            *zap.Logger
}

func (o Options) withDefaults() Options {
	if o.WatchInterval <= 0 {
		o.WatchInterval = 5 * time.Second
	}
	if o.IdleAfter <= 0 {
		o.IdleAfter = 30 * time.Second
	}
	if o.ReadBytes <= 0 {
		o.ReadBytes = 1 << 20
	}
	if o.BufferBytes <= 0 {
		o.BufferBytes = 256 << 10
	}
	if o.BufferRuns <= 0 {
		o.BufferRuns = 16
	}
	if o.Slots <= 0 {
		o.Slots = 8
	}
	if o.DescribeParallelism <= 0 {
		o.DescribeParallelism = 8
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Engine serves subscriptions: it owns the shared shard readers they
// ride (a follow.Set of their own, whose readers park), and the watchers
// of their prefixes.
type Engine struct {
	store  blob.Store
	reader *shard.Reader
	set    *follow.Set
	opts   Options
	log    *zap.Logger

	ctx  context.Context // the watchers' parent; cancelled by Close
	stop context.CancelFunc
	wg   sync.WaitGroup // the watchers' goroutines

	mu       sync.Mutex
	watchers map[string]*watcher // by prefix; refcounted by subscriptions
	closed   bool

	subscriptions atomic.Int64
	listPages     atomic.Uint64
}

// New returns an Engine that lists store and reads shards through reader.
func New(store blob.Store, reader *shard.Reader, opts Options) *Engine {
	opts = opts.withDefaults()
	ctx, stop := context.WithCancel(context.Background())
	set := follow.NewSet(reader, follow.Options{
		Notifier:    opts.Notifier,
		PollMin:     opts.PollMin,
		PollMax:     opts.PollMax,
		ReadBytes:   opts.ReadBytes,
		BufferBytes: opts.BufferBytes,
		BufferRuns:  opts.BufferRuns,
		IdleAfter:   opts.IdleAfter,
		// A shard's follower has read up to the tail when its reader
		// starts, and the watcher wakes the reader of a shard that
		// changes: an idle shard costs one read at the start, not
		// IdleAfter of polling.
		ParkAtStart: true,
		Logger:      opts.Logger,
	})
	return &Engine{store: store, reader: reader, set: set, opts: opts, log: opts.Logger, ctx: ctx, stop: stop, watchers: map[string]*watcher{}}
}

// Close stops the watchers and the shard readers and waits for them. A
// server closes the engine after its subscriptions have ended; one still
// running ends with ErrClosed or follow.ErrClosed.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
	e.set.Close()
}

// LastSeq is the last seq of shard that this engine's shared reader of it
// has read, and whether one runs: what the subscriptions of this process
// already know of the shard's tail, with no read.
func (e *Engine) LastSeq(shardName string) (uint64, bool) { return e.set.LastSeq(shardName) }

// Subscriptions is how many subscriptions run.
func (e *Engine) Subscriptions() int { return int(e.subscriptions.Load()) }

// ListPages is how many listing pages the watchers have requested.
func (e *Engine) ListPages() uint64 { return e.listPages.Load() }

// Readers and Parked are how many shard readers run, and how many of them
// are parked.
func (e *Engine) Readers() int { return e.set.Readers() }
func (e *Engine) Parked() int  { return e.set.Parked() }

// acquire returns the watcher of prefix, starting it if none runs.
func (e *Engine) acquire(prefix string) (*watcher, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	w := e.watchers[prefix]
	if w == nil {
		w = newWatcher(e, prefix)
		e.watchers[prefix] = w
		ctx, cancel := context.WithCancel(e.ctx)
		w.cancel = cancel
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			defer close(w.done)
			w.run(ctx)
		}()
	}
	w.refs++
	return w, nil
}

// release gives back a watcher acquire returned; the last one stops it and
// waits for it.
func (e *Engine) release(w *watcher) {
	e.mu.Lock()
	w.refs--
	last := w.refs == 0
	if last && e.watchers[w.prefix] == w {
		delete(e.watchers, w.prefix)
	}
	e.mu.Unlock()
	if last {
		w.cancel()
		<-w.done
	}
}
