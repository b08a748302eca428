package shard

import (
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/read"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// The read path lives in package read, beside the writer: Get, BatchGet,
// Scan, following and Describe resolve records with one function there.
// These names hand it on, so that callers import one package.

type (
	// Reader reads records of any shard (see read.Reader).
	Reader = read.Reader
	// ReaderOptions configures a Reader.
	ReaderOptions = read.ReaderOptions
	// ScanOptions select what Scan delivers.
	ScanOptions = read.ScanOptions
	// Batch is a run of records in seq order, and where to resume.
	Batch = read.Batch
	// BatchGetOptions configures a BatchGet.
	BatchGetOptions = read.BatchGetOptions
	// BatchResult is one id's outcome of a BatchGet.
	BatchResult = read.BatchResult
	// Follower follows one shard's commits (see read.Follower).
	Follower = read.Follower
	// Position is where a Follower resumes.
	Position = read.Position
	// Records is a run of checked records of one shard, in seq order.
	Records = read.Records
	// Info describes a shard as its manifest records it.
	Info = read.Info
	// Notifier tells followers of a shard that a commit landed.
	Notifier = shardlog.Notifier
)

// ErrScanDone ends a Scan whose limit was reached (see read.ErrScanDone).
var ErrScanDone = read.ErrScanDone

// NewReader returns a Reader over store.
func NewReader(store blob.Store, opts ReaderOptions) *Reader { return read.NewReader(store, opts) }

// PositionAfter is the Position after seq of a shard not seen yet.
func PositionAfter(seq uint64) Position { return read.PositionAfter(seq) }

// PollBounds is a follower's polling interval bounds, defaults applied.
func PollBounds(lo, hi time.Duration) (time.Duration, time.Duration) { return read.PollBounds(lo, hi) }

// NewNotifier returns an empty Notifier.
func NewNotifier() *Notifier { return shardlog.NewNotifier() }
