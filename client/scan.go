package client

import (
	"context"
	"io"
	"iter"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// ScanOption configures one Scan.
type ScanOption func(*scanConfig)

type scanConfig struct {
	afterSeq uint64
	limit    uint32
	follow   bool
	rollout  string
	role     rolloutv1.Role
	training *bool
	fields   []string
	cursor   *Cursor
}

// AfterSeq starts the scan after seq (exclusive); 0, the default, starts at
// the beginning. Pass a checkpointed Cursor's Seq to continue from it.
func AfterSeq(seq uint64) ScanOption { return func(s *scanConfig) { s.afterSeq = seq } }

// Follow keeps the scan going after the last committed record, yielding
// new records as they are committed, until ctx ends.
func Follow() ScanOption { return func(s *scanConfig) { s.follow = true } }

// Limit stops the scan after n records (after filtering); 0 means no limit.
func Limit(n uint32) ScanOption { return func(s *scanConfig) { s.limit = n } }

// RolloutID yields only the records of rollout id.
func RolloutID(id string) ScanOption { return func(s *scanConfig) { s.rollout = id } }

// Role yields only the records with role r.
func Role(r rolloutv1.Role) ScanOption { return func(s *scanConfig) { s.role = r } }

// IncludeInTraining yields only the records whose include_in_training is v.
func IncludeInTraining(v bool) ScanOption { return func(s *scanConfig) { s.training = &v } }

// Fields returns only these top-level Record fields, by proto name ("id",
// "seq", "content", …); id and seq always come back. Leave out large
// payloads and logprobs this way.
func Fields(names ...string) ScanOption {
	return func(s *scanConfig) { s.fields = append(s.fields, names...) }
}

// WithCursor makes the scan keep c up to date, for checkpointing; c may be
// read from any goroutine. The scan starts after AfterSeq, not after c.
func WithCursor(c *Cursor) ScanOption { return func(s *scanConfig) { s.cursor = c } }

// Cursor is a scan's resume point: every record with a seq up to it has
// been yielded, or skipped by the scan's filters. While a record is being
// yielded, and after, the cursor is that record's seq. Once the loop body
// has returned for the last record of a batch the server sent, it is the
// batch's cursor, which is higher when filters skipped records after it.
// Scan again with AfterSeq(cursor.Seq()) and the same filters to continue
// with nothing missed or repeated.
type Cursor struct{ seq atomic.Uint64 }

// Seq is the cursor's value: a seq to pass to AfterSeq.
func (c *Cursor) Seq() uint64 { return c.seq.Load() }

func (o *scanConfig) request(shard string, after uint64, limit uint32) *rolloutv1.ScanRequest {
	req := &rolloutv1.ScanRequest{Shard: shard, AfterSeq: after, Limit: limit, Follow: o.follow,
		RolloutId: o.rollout, Role: o.role, IncludeInTraining: o.training}
	if len(o.fields) > 0 {
		req.Fields = &fieldmaskpb.FieldMask{Paths: o.fields}
	}
	return req
}

// Scan yields shard's records in commit (seq) order, one at a time, after
// the AfterSeq cursor; with Follow it keeps yielding new commits until ctx
// ends. A failure is yielded as the last element, with a nil record.
//
// When the stream breaks with UNAVAILABLE (the server shutting down ends
// it with SCAN_INTERRUPTED and the cursor to resume from), or with
// SCAN_INTERRUPTED for a cause a new stream gets past, Scan opens a new
// stream after its cursor, so that no record is missed or yielded twice,
// waiting between attempts as a unary call does (docs/clients.md). It
// gives up after the retry budget's MaxAttempts consecutive failures with
// nothing received, or the call timeout after the break. Errors:
// ErrNotFound (the shard was never written; a following scan waits for it
// instead), ErrInvalidArgument, ErrPermissionDenied, and the last failure
// once the budget or ctx is spent.
func (c *Client) Scan(ctx context.Context, shard string, opts ...ScanOption) iter.Seq2[*rolloutv1.Record, error] {
	o := scanConfig{}
	for _, opt := range opts {
		opt(&o)
	}
	return func(yield func(*rolloutv1.Record, error) bool) {
		if c.closed.Load() {
			yield(nil, ErrClosed)
			return
		}
		ctx := withShard(ctx, shard)
		cur := o.cursor
		if cur == nil {
			cur = &Cursor{}
		}
		cursor, left := o.afterSeq, o.limit
		cur.seq.Store(cursor)
		p := c.cfg.retry
		failures := 0
		var broke time.Time // when the failures in a row began
		for {
			stream, cancel, err := c.openScan(ctx, o.request(shard, cursor, left), failures > 0)
			if err == nil {
				for {
					var resp *rolloutv1.ScanResponse
					if resp, err = stream.Recv(); err != nil {
						break
					}
					failures = 0
					for _, r := range resp.GetRecords() {
						cursor = max(cursor, r.GetSeq())
						cur.seq.Store(cursor)
						if !yield(r, nil) {
							cancel()
							return
						}
						if left > 0 {
							left--
						}
					}
					cursor = max(cursor, resp.GetCursor())
					cur.seq.Store(cursor)
				}
				cancel()
			}
			if err == io.EOF || (o.limit > 0 && left == 0) {
				return
			}
			if failures == 0 {
				broke = time.Now()
			}
			failures++
			e := newError(err, failures)
			if e.Reason == ReasonScanInterrupted {
				// The server says every record up to here was sent or
				// filtered out; its status arrived after them.
				if v, err := strconv.ParseUint(e.Metadata[MetadataResumeAfterSeq], 10, 64); err == nil && v > cursor {
					cursor = v
					cur.seq.Store(cursor)
				}
			}
			if ctx.Err() != nil || failures >= p.MaxAttempts || !retryable(readCall, e) || c.closed.Load() ||
				!c.resumePause(ctx, broke, p.backoff(failures, e.RetryDelay, jitter), transportFailure(e)) {
				yield(nil, c.giveUp(e, broke))
				return
			}
		}
	}
}

// resumePause is pause within the resumes' budget: the call timeout since
// the stream broke.
func (c *Client) resumePause(ctx context.Context, broke time.Time, d time.Duration, transport bool) bool {
	rctx, cancel := context.WithDeadline(ctx, broke.Add(c.cfg.callTimeout))
	defer cancel()
	return c.pause(rctx, d, transport)
}

// openScan opens a Scan stream under a context of its own; the caller
// calls the returned cancel when done with the stream. A resuming scan
// gives up opening after the attempt timeout: a connection that is still
// CONNECTING holds a new stream until it is READY or fails.
func (c *Client) openScan(ctx context.Context, req *rolloutv1.ScanRequest, resume bool) (grpc.ServerStreamingClient[rolloutv1.ScanResponse], context.CancelFunc, error) {
	sctx, cancel := context.WithCancel(ctx)
	if !resume {
		stream, err := c.rpc.Scan(sctx, req)
		if err != nil {
			cancel()
			return nil, nil, err
		}
		return stream, cancel, nil
	}
	t := time.AfterFunc(c.cfg.attemptTimeout, cancel)
	stream, err := c.rpc.Scan(sctx, req)
	if !t.Stop() && ctx.Err() == nil {
		cancel()
		return nil, nil, status.Errorf(codes.DeadlineExceeded, "resuming the scan after seq %d: no stream within %v", req.GetAfterSeq(), c.cfg.attemptTimeout)
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return stream, cancel, nil
}
