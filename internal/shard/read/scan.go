package read

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/defaults"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// ScanOptions select what Scan delivers.
type ScanOptions struct {
	// AfterSeq is the exclusive cursor: Scan delivers records with a higher
	// seq. 0 starts at the beginning.
	AfterSeq uint64
	// Limit stops the scan after this many delivered records; 0 means none.
	Limit int
	// Filter, when set, keeps only the records it accepts. It sees every
	// record once, in seq order, and must not keep it.
	Filter func(*rolloutv1.Record) bool
	// Project, when set, trims each record Filter kept (for example to the
	// fields a client asked for) before it joins a batch, so that batches
	// are sized by what is delivered, not by what is stored. It may modify
	// the record, and must not keep it.
	Project func(*rolloutv1.Record)
	// Follow keeps the scan going after the last committed record, delivering
	// new commits as they land, until ctx ends.
	Follow bool
	// Notifier wakes a following scan when a writer of this process commits
	// to the shard; a scan also polls the manifest, because another instance
	// may be the writer. Nil means polling only.
	Notifier *shardlog.Notifier
	// PollMin and PollMax bound the manifest polling interval of a following
	// scan; it backs off while the shard is idle. Defaults 50 ms and 2 s.
	PollMin, PollMax time.Duration
	// BatchRecords and BatchBytes bound one delivered batch. BatchBytes
	// counts each delivered record's encoding (after Project) with its
	// framing as an element of a repeated field; a batch exceeds it only
	// when it holds a single record larger than BatchBytes. Defaults 256
	// records and 1 MiB.
	BatchRecords int
	BatchBytes   int
	// ReadBytes bounds one ranged GET of record bytes. Default 4 MiB.
	ReadBytes int64
	// Raw delivers each record's stored encoding (a checksum-verified
	// rollout.v1.Record message) in Batch.Raw instead of decoding it, for a
	// caller that only forwards records. It cannot be combined with Filter.
	Raw bool
}

// PollBounds is the polling interval of a follower, from lo when it has
// just seen a commit up to hi while the shard stays idle, with the defaults
// (50 ms and 2 s) for what is unset. A following Scan and the shared
// follow readers poll alike.
func PollBounds(lo, hi time.Duration) (time.Duration, time.Duration) {
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi < lo {
		hi = max(lo, 2*time.Second)
	}
	return lo, hi
}

func (o ScanOptions) withDefaults() ScanOptions {
	o.PollMin, o.PollMax = PollBounds(o.PollMin, o.PollMax)
	defaults.Positive(&o.BatchRecords, 256)
	defaults.Positive(&o.BatchBytes, 1<<20)
	defaults.Positive(&o.ReadBytes, 4<<20)
	return o
}

// Batch is a run of records in seq order. Cursor is where to resume: every
// record up to and including it has been delivered or filtered out. A batch
// may carry no records, only a cursor that moved past filtered ones.
type Batch struct {
	Records []*rolloutv1.Record
	// Raw holds the records' encodings instead, with ScanOptions.Raw.
	Raw    [][]byte
	Cursor uint64
}

// errScanDone stops a scan at its limit.
var errScanDone = errors.New("scan limit reached")

// Scan delivers the shard's records in seq order, after opts.AfterSeq, in
// batches, to emit. It reads the manifest afresh for each pass, skips
// generations wholly before the cursor by their sequence ranges, and reads
// records with large ranged GETs. Because it resumes from its cursor, a
// merge that rewrites generations mid-scan neither skips nor repeats a
// record. With Follow it then waits for new commits until ctx ends.
//
// emit's error stops the scan and is returned. Errors: ErrShardNotFound,
// ErrCorrupt naming the blob, a storage error, or ctx's error (Follow ends
// only that way).
func (r *Reader) Scan(ctx context.Context, shard string, opts ScanOptions, emit func(Batch) error) error {
	if opts.Raw && (opts.Filter != nil || opts.Project != nil) {
		return errors.New("shard: a raw scan cannot filter or project")
	}
	opts = opts.withDefaults()
	s := &scanner{r: r, shard: shard, opts: opts, emit: emit, at: cursor{seq: opts.AfterSeq}, emitted: opts.AfterSeq}
	var wait func() <-chan struct{}
	if opts.Follow && opts.Notifier != nil {
		var cancel func()
		wait, cancel = opts.Notifier.Subscribe(shard)
		defer cancel()
	}
	poll := opts.PollMin
	for {
		var woken <-chan struct{}
		if wait != nil {
			woken = wait() // taken before the pass, so no commit is missed
		}
		moved, err := s.pass(ctx)
		if errors.Is(err, errScanDone) {
			return nil
		}
		if err != nil {
			return err
		}
		if !opts.Follow {
			return nil
		}
		if moved {
			poll = opts.PollMin
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-woken:
		case <-time.After(poll):
			poll = min(2*poll, opts.PollMax)
		}
	}
}

type scanner struct {
	r     *Reader
	shard string
	opts  ScanOptions
	emit  func(Batch) error
	// at is where the scan resumes, and the incarnation it reads once it
	// has seen the shard live.
	at        cursor
	emitted   uint64 // cursor of the last batch emitted
	sent      int    // records in batches already emitted
	delivered int
	batch     Batch
	batchSize int
}

// pass reads everything committed after the cursor in the current view.
// It reports whether the cursor moved.
func (s *scanner) pass(ctx context.Context) (bool, error) {
	start := s.at.seq
	q := query{all: true, follow: s.opts.Follow, readBytes: s.opts.ReadBytes, parallel: 1}
	if err := s.r.resolve(ctx, s.shard, &s.at, q, s.deliver); err != nil {
		return s.at.seq != start, err
	}
	return s.at.seq != start, s.flush()
}

// deliver adds the records of one span read to the batch.
func (s *scanner) deliver(sp span, recs [][]byte) error {
	for i, e := range sp.entries {
		if s.opts.Raw {
			if err := s.addRaw(recs[i], e.GetSeq()); err != nil {
				return err
			}
			continue
		}
		rec, err := decodeRecord(sp.blob, e, recs[i])
		if err != nil {
			return err
		}
		if err := s.add(rec, e.GetSeq(), recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// addRaw puts one record's encoding into the batch.
func (s *scanner) addRaw(b []byte, seq uint64) error {
	size := framedSize(len(b))
	if err := s.makeRoom(size); err != nil {
		return err
	}
	s.batch.Cursor = seq
	s.batch.Raw = append(s.batch.Raw, b)
	s.batchSize += size
	return s.after()
}

// add puts one record (or, filtered out, just its seq) into the batch. b
// is its stored encoding.
func (s *scanner) add(rec *rolloutv1.Record, seq uint64, b []byte) error {
	keep := s.opts.Filter == nil || s.opts.Filter(rec)
	var size int
	if keep {
		n := len(b)
		if s.opts.Project != nil {
			s.opts.Project(rec)
			n = proto.Size(rec)
		}
		size = framedSize(n)
		if err := s.makeRoom(size); err != nil {
			return err
		}
	}
	s.batch.Cursor = seq
	if keep {
		s.batch.Records = append(s.batch.Records, rec)
		s.batchSize += size
	}
	return s.after()
}

// framedSize is the size of an n-byte record as an element of a repeated
// message field: tag, length and the record.
func framedSize(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// makeRoom flushes the batch first when a record of size bytes would take
// it past BatchBytes, so that a batch only exceeds BatchBytes when a single
// record does.
func (s *scanner) makeRoom(size int) error {
	if len(s.batch.Records)+len(s.batch.Raw) > 0 && s.batchSize+size > s.opts.BatchBytes {
		return s.flush()
	}
	return nil
}

// after counts what add delivered and flushes a full batch.
func (s *scanner) after() error {
	s.delivered = s.sent + len(s.batch.Records) + len(s.batch.Raw)
	if s.opts.Limit > 0 && s.delivered >= s.opts.Limit {
		if err := s.flush(); err != nil {
			return err
		}
		return errScanDone
	}
	if len(s.batch.Records)+len(s.batch.Raw) >= s.opts.BatchRecords || s.batchSize >= s.opts.BatchBytes {
		return s.flush()
	}
	return nil
}

func (s *scanner) flush() error {
	n := len(s.batch.Records) + len(s.batch.Raw)
	if n == 0 && s.batch.Cursor <= s.emitted {
		return nil
	}
	b := s.batch
	s.batch, s.batchSize = Batch{}, 0
	s.emitted = b.Cursor
	s.sent += n
	return s.emit(b)
}

// Records is a run of checked records of one shard, in seq order, read
// together from one generation of one incarnation. It is immutable and may
// be shared by any number of followers.
type Records struct {
	incarnation uint64
	s           span
	recs        [][]byte
	bytes       int
}

// Last is the seq of the last record.
func (r Records) Last() uint64 { return r.s.entries[len(r.s.entries)-1].GetSeq() }

// Bytes is the size of the records' encodings: what holding them costs.
func (r Records) Bytes() int { return r.bytes }
