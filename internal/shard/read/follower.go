package read

import (
	"context"
	"errors"
	"sort"
)

// The parts a shared tail reader (internal/shard/follow) is built from:
// ReadNew reads a shard's new records once for any number of followers,
// and a Follower is one following Scan's own cursor, filter, projection
// and batch, fed either by its own reads (CatchUp) or by records another
// goroutine read (Deliver). Scan's own follow loop reads for itself alone.

// ErrScanDone ends a following scan that reached its limit. Scan itself
// returns nil then.
var ErrScanDone = errScanDone

// Position is where a reader of a shard is: the last seq passed, and the
// incarnation it reads once it has seen the shard live. The zero Position
// is the start of a shard not seen yet.
type Position struct{ c cursor }

// PositionAfter is the Position after seq of a shard not seen yet, as a
// following Scan with AfterSeq seq starts.
func PositionAfter(seq uint64) Position { return Position{cursor{seq: seq}} }

// Seq is the last seq passed.
func (p Position) Seq() uint64 { return p.c.seq }

// ReadNew reads the records of shard after at as a following Scan does,
// hands them to got one run at a time, and moves at past each run got
// took. A shard not written yet, or deleted before at saw it live, reads
// as nothing new (a follower waits for it).
//
// Errors: ErrShardDeleted when the incarnation at saw live is gone,
// ErrCorrupt naming the blob, a storage error, ctx's error, or got's.
func (r *Reader) ReadNew(ctx context.Context, shard string, at *Position, readBytes int64, got func(Records) error) error {
	if readBytes <= 0 {
		readBytes = ScanOptions{}.withDefaults().ReadBytes
	}
	q := query{all: true, follow: true, readBytes: readBytes, parallel: 1}
	return r.resolve(ctx, shard, &at.c, q, func(s span, recs [][]byte) error {
		n := 0
		for _, b := range recs {
			n += len(b)
		}
		// resolve pinned the incarnation before reading the view.
		return got(Records{incarnation: at.c.incarnation, s: s, recs: recs, bytes: n})
	})
}

// Follower is one following Scan's state: its cursor, filter, projection
// and the batch it is building. One goroutine uses it.
type Follower struct{ s *scanner }

// NewFollower returns the follower of shard that opts describe (Follow is
// implied; PollMin, PollMax and Notifier are the caller's business), which
// sends its batches to emit.
func (r *Reader) NewFollower(shard string, opts ScanOptions, emit func(Batch) error) (*Follower, error) {
	if opts.Raw && (opts.Filter != nil || opts.Project != nil) {
		return nil, errors.New("shard: a raw scan cannot filter or project")
	}
	opts.Follow = true
	opts = opts.withDefaults()
	return &Follower{&scanner{r: r, shard: shard, opts: opts, emit: emit, at: cursor{seq: opts.AfterSeq}, emitted: opts.AfterSeq}}, nil
}

// Position is where the follower is.
func (f *Follower) Position() Position { return Position{f.s.at} }

// CatchUp reads, on the follower's own, everything committed after its
// cursor in the current view, delivers it and flushes. It reports whether
// the cursor moved. Errors: as Scan's, and ErrScanDone at the limit.
func (f *Follower) CatchUp(ctx context.Context) (bool, error) {
	return f.s.pass(ctx)
}

// Deliver adds the records of recs after the follower's cursor to its
// batch, emitting full batches; Flush emits the rest. It reports false,
// delivering nothing, when recs belong to another incarnation than the one
// the follower reads: the follower must then read on its own, which tells
// a deleted shard from a stale run. Errors: emit's, ErrCorrupt, and
// ErrScanDone at the limit.
func (f *Follower) Deliver(recs Records) (bool, error) {
	c := &f.s.at
	if c.seen && recs.incarnation != c.incarnation {
		return false, nil
	}
	es := recs.s.entries
	i := sort.Search(len(es), func(i int) bool { return es[i].GetSeq() > c.seq })
	if i == len(es) {
		return true, nil
	}
	c.seen, c.incarnation = true, recs.incarnation
	s := recs.s
	s.entries = es[i:]
	if err := f.s.deliver(s, recs.recs[i:]); err != nil {
		return true, err
	}
	c.seq = es[len(es)-1].GetSeq()
	return true, nil
}

// Flush emits the batch being built, if it holds records or moved the
// cursor.
func (f *Follower) Flush() error { return f.s.flush() }
