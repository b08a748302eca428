package shard

import (
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/clock"
)

// Options configures a Writer. The zero value gives sane defaults.
type Options struct {
	// Logger receives lifecycle events; nil means no logging.
	Logger *zap.Logger
	// Clock is the time source; nil means the wall clock.
	Clock clock.Clock
	// Cache holds generation footer indexes; share one per process. Nil
	// gives the writer a small private cache.
	Cache *IndexCache
	// MaxQueuedBytes caps the bytes of records waiting to be committed.
	// Past it, Append fails with ErrBackpressure. Default 64 MiB.
	MaxQueuedBytes int64
	// MaxGenerationBytes caps one generation blob; a larger queue is split
	// over several commits. Default 16 MiB.
	MaxGenerationBytes int64
	// RetryBackoff is the first delay between retries of a storage call that
	// failed retryably; it doubles up to 32 times this. Default 20 ms.
	RetryBackoff time.Duration
	// CommitTimeout bounds one commit (generation PUT plus manifest CAS,
	// with retries). Default 30 s.
	CommitTimeout time.Duration
	// MaxEpochRecords bounds the per-epoch commit records kept in the
	// manifest. Default 64.
	MaxEpochRecords int
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Cache == nil {
		o.Cache = NewIndexCache(8 << 20)
	}
	if o.MaxQueuedBytes <= 0 {
		o.MaxQueuedBytes = 64 << 20
	}
	if o.MaxGenerationBytes <= 0 {
		o.MaxGenerationBytes = 16 << 20
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 20 * time.Millisecond
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = 30 * time.Second
	}
	if o.MaxEpochRecords <= 0 {
		o.MaxEpochRecords = 64
	}
	return o
}
