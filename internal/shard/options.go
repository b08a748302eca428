package shard

import (
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/defaults"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// The defaults of Options, which a zero field takes.
const (
	DefaultCacheBytes         = shardlog.DefaultCacheBytes // a writer's private cache, when Options.Cache is nil
	DefaultMaxQueuedBytes     = 64 << 20
	DefaultMaxGenerationBytes = 16 << 20
	DefaultRetryBackoff       = 20 * time.Millisecond
	DefaultCommitTimeout      = 30 * time.Second
	DefaultMaxEpochRecords    = 64

	DefaultMergeRun            = 4
	DefaultMergeMaxGenerations = 16
	DefaultMergeAge            = time.Minute
	DefaultMergeTierBytes      = 64 << 10
	DefaultMergeMaxBytes       = 64 << 20
	DefaultMergeMaxSources     = 32
	DefaultEditDelay           = 200 * time.Millisecond
	DefaultMergeInterval       = 5 * time.Second
	DefaultRetireGrace         = 10 * time.Second
	DefaultOrphanScanInterval  = 10 * time.Minute

	DefaultCheckpointEvery    = 16
	DefaultCheckpointInterval = time.Second
)

// Options configures a Writer. The zero value gives sane defaults.
type Options struct {
	// Logger receives lifecycle events; nil means no logging.
	Logger *zap.Logger
	// Clock is the time source; nil means the wall clock.
	Clock clock.Clock
	// Cache holds generation indexes, filters and small blobs; share one
	// per process. Nil gives the writer a small private cache.
	Cache *BlobCache
	// Presence bounds the memory that writers spend answering "is this
	// id present?" from memory (budget.go); share one per process. Nil
	// bounds each writer by its own caps only.
	Presence *PresenceBudget
	// Notifier, when set, is told of every commit, to wake following scans.
	Notifier *Notifier
	// Lineage, when set, remembers how this process's writers of each shard
	// ended, so that a reopen after a writer that left no create in doubt
	// writes no fence (protocol v2). Share one per process. Nil fences on
	// every open.
	Lineage *Lineage
	// CheckpointEvery is K of protocol v2: a writer checkpoints when K log
	// positions are not yet in the manifest, and creates none beyond 2K
	// until a checkpoint lands. A lone client pays about 1 + 1/K blob
	// writes per append. Default 16.
	CheckpointEvery int
	// CheckpointInterval is how long a position may wait for a checkpoint
	// when fewer than CheckpointEvery are waiting (protocol v2). Default 1 s.
	CheckpointInterval time.Duration
	// OnFence and OnCheckpoint, when set, are called after each fence and
	// each checkpoint the writer wrote (protocol v2), for metrics.
	OnFence      func()
	OnCheckpoint func()
	// OnMerge, when set, is called after each committed merge, for metrics.
	OnMerge func(sources, records int, took time.Duration)
	// Tracer, when set, gives an append's trace a span for its wait in the
	// queue and one for the commit that carried it, and each checkpoint
	// a trace of its own (trace.go). Nil means no tracing work at all.
	Tracer trace.Tracer
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

	// DisableBackground turns the writer's background work off: merging,
	// folding and GC. Generations and retired blobs then only pile up; it is
	// for debugging and for tests that want every blob left in place.
	DisableBackground bool
	// DisableMerge is DisableBackground's old name, which did not say that
	// it also stops GC. Either turns the background work off.
	//
	// Deprecated: use DisableBackground.
	DisableMerge bool

	// The merge policy (policy.go, merger.go).
	//
	// MergeRun: this many contiguous generations of one size tier are
	// merged. Default 4.
	MergeRun int
	// MergeMaxGenerations is the count trigger: with this many live
	// generations, the cheapest run is merged. Default 16.
	MergeMaxGenerations int
	// MergeAge is the time trigger: a generation never merged and older
	// than this is merged with its neighbours. Default 1 minute.
	MergeAge time.Duration
	// MergeTierBytes is the size of the smallest tier; tiers grow by
	// MergeRun. Default 64 KiB.
	MergeTierBytes int64
	// MergeMaxBytes and MergeMaxSources cap one merge pass. Defaults 64 MiB
	// and 32.
	MergeMaxBytes   int64
	MergeMaxSources int
	// EditDelay is how long a merge's or GC's manifest edit waits for the
	// next append's commit, whose CAS it then joins, before it is committed
	// in a CAS of its own. Edits are never urgent, and a lone client's
	// appends would otherwise share the store with a manifest write per
	// merge. Under protocol v2 an edit rides the checkpoint that waiting
	// log positions will get anyway, and waits EditDelay only when none
	// wait. Default 200 ms; negative commits edits at once.
	EditDelay time.Duration
	// MergeInterval is how often the merger checks its time trigger when no
	// commit wakes it, and how often GC deletes what fell due. Default 5 s.
	MergeInterval time.Duration
	// RetireGrace is how long a generation replaced by a merge is kept for
	// readers holding an older manifest. A reader that still finds it gone
	// re-reads the manifest and retries, so this need only cover one Get;
	// it is kept short because the retired list rides in every manifest
	// write. Default 10 s.
	RetireGrace time.Duration
	// OrphanScanInterval is how often GC lists the shard's blobs for orphans
	// of earlier epochs; the first scan runs soon after Open. Default 10
	// minutes.
	OrphanScanInterval time.Duration
}

func (o Options) withDefaults() Options {
	o.DisableBackground = o.DisableBackground || o.DisableMerge
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Cache == nil {
		o.Cache = NewBlobCache(DefaultCacheBytes)
	}
	defaults.Positive(&o.MaxQueuedBytes, DefaultMaxQueuedBytes)
	defaults.Positive(&o.MaxGenerationBytes, DefaultMaxGenerationBytes)
	defaults.Positive(&o.RetryBackoff, DefaultRetryBackoff)
	defaults.Positive(&o.CommitTimeout, DefaultCommitTimeout)
	defaults.Positive(&o.MaxEpochRecords, DefaultMaxEpochRecords)
	defaults.Positive(&o.MergeMaxGenerations, DefaultMergeMaxGenerations)
	defaults.Positive(&o.MergeAge, DefaultMergeAge)
	defaults.Positive(&o.MergeTierBytes, DefaultMergeTierBytes)
	defaults.Positive(&o.MergeMaxBytes, DefaultMergeMaxBytes)
	defaults.Positive(&o.MergeInterval, DefaultMergeInterval)
	defaults.Positive(&o.RetireGrace, DefaultRetireGrace)
	defaults.Positive(&o.CheckpointEvery, DefaultCheckpointEvery)
	defaults.Positive(&o.CheckpointInterval, DefaultCheckpointInterval)
	defaults.Positive(&o.OrphanScanInterval, DefaultOrphanScanInterval)
	if o.MergeRun < 2 {
		o.MergeRun = DefaultMergeRun
	}
	if o.MergeMaxSources < 2 {
		o.MergeMaxSources = DefaultMergeMaxSources
	}
	if o.EditDelay == 0 {
		o.EditDelay = DefaultEditDelay
	}
	return o
}
