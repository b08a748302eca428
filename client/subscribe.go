package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// SubscribeStart says where a subscription starts reading each shard that
// SubscribeOptions.Positions does not name. Its values are
// rolloutv1.SubscribeStart's.
type SubscribeStart int

const (
	// StartDefault: the consumer's stored positions when it exists, else
	// StartEarliest. As a ResetConsumer target: exactly the positions given.
	StartDefault SubscribeStart = iota
	// StartEarliest: every shard from its first record.
	StartEarliest
	// StartLatest: only records committed after the subscription started;
	// shards created later from their first record.
	StartLatest
	// StartConsumer: the consumer's stored positions; ErrNotFound when it
	// does not exist. A shard it has no position for is read from its first
	// record.
	StartConsumer
)

// SubscribeOptions selects the shards and records of a subscription.
type SubscribeOptions struct {
	// Start says where to start the shards Positions does not name.
	Start SubscribeStart
	// Consumer names the consumer (within the subscription's prefix) whose
	// positions to start from, and which Commit stores positions for.
	Consumer string
	// Member of Members: this subscription reads member's stable share of
	// the prefix's shards (rendezvous hashing of the shard name). Members 0
	// or 1 reads every shard.
	Member, Members int
	// Positions are per-shard cursors to continue after (shard -> the
	// cursor last processed), overriding Start for those shards.
	Positions map[string]uint64

	// The filters and field mask of Scan's RolloutID, IncludeInTraining,
	// Role and Fields options.
	RolloutID         string
	IncludeInTraining *bool
	Role              rolloutv1.Role
	Fields            []string
}

// SubscribeBatch is one shard's records, in seq order, and the cursor to
// continue that shard after.
type SubscribeBatch struct {
	Shard string
	// Records may be empty when the filters passed over every record up to
	// Cursor.
	Records []*rolloutv1.Record
	// Cursor: every record of Shard with a seq up to it was delivered or
	// filtered out.
	Cursor uint64
	// Deleted: the shard was deleted; its records not delivered are gone.
	// The subscription goes on watching the name: a shard appended to
	// after its delete continues with seqs above Cursor.
	Deleted bool
}

// subscribeBuffer is how many received batches may wait for Batches: a
// few, so that receiving overlaps the caller's processing while a caller
// that stops reading stops the server's stream (gRPC's flow control, with
// the client's stream window, holds the rest).
const subscribeBuffer = 4

// errSubscriptionClosed is the cause a closed subscription's context ends
// with.
var errSubscriptionClosed = errors.New("client: subscription closed")

// Subscription is a Subscribe stream, resumed across breaks. One goroutine,
// which Close stops, receives the stream into a small buffer; Batches
// yields from it. Batches is for one goroutine at a time; Commit,
// Positions, ConsumerGeneration and Close may be called from any.
type Subscription struct {
	c      *Client
	prefix string
	opts   SubscribeOptions

	// ctx is the subscription's life: the caller's context until Close (or
	// a Commit refused as CONSUMER_RESET) cancels it, with a cause.
	ctx    context.Context
	cancel context.CancelCauseFunc
	out    chan *SubscribeBatch
	done   chan struct{} // closed when the receiving goroutine has returned
	err    error         // why the stream ended: written before out is closed
	closed atomic.Bool

	// generation is the consumer generation the subscription reads, 0
	// until one is known (no consumer, or one not yet committed).
	generation atomic.Uint64

	// Owned by the receiving goroutine (by Subscribe before it starts it).
	recv         received
	stream       grpc.ServerStreamingClient[rolloutv1.SubscribeResponse]
	streamCancel context.CancelFunc
	first        *rolloutv1.SubscribeResponse // the started message, which may carry a batch
	opened       bool                         // a stream has started: the next one resumes

	commitMu sync.Mutex // one Commit at a time

	mu        sync.Mutex
	yielded   map[string]uint64 // guarded by mu: the cursors of yielded batches
	committed map[string]uint64 // guarded by mu: what Commit stored
	reported  bool              // guarded by mu: Batches yielded err
}

// Subscribe streams the records of every shard under prefix (on whole
// '/'-separated segments, as ListShards): those that exist and those
// created while it runs, each shard in seq order, acknowledged records
// only. It returns once the server has fixed the starting positions
// (everything committed afterwards is delivered); read with Batches, and
// Close the subscription when done. ctx bounds the subscription's life.
//
// When the stream breaks with UNAVAILABLE (a server shutting down ends it
// with SCAN_INTERRUPTED), or a connection breaks, the subscription opens a
// new one with the same options and Positions set to the cursors received
// so far, so that no record is missed or yielded twice: as Scan does, with
// the same retry budget (docs/clients.md). A resumed stream must read the
// consumer generation the subscription started with; when the consumer
// was reset or deleted in between, the subscription ends with
// ErrConsumerReset. (With StartLatest, the server's started message names
// where it started each shard that existed, and a resume sends those from
// StartEarliest, so it misses nothing committed in a break.) Any instance
// serves any prefix: Subscribe sets no ShardHeader, and with WithAffinity
// the ring picks an instance at random.
//
// Errors: ErrNotFound (StartConsumer and no such consumer),
// ErrInvalidArgument, ErrPermissionDenied, and the last failure once the
// retry budget or ctx is spent.
func (c *Client) Subscribe(ctx context.Context, prefix string, opts SubscribeOptions) (*Subscription, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if opts.Member < 0 || opts.Members < 0 {
		return nil, fmt.Errorf("client: Subscribe: member %d of %d: want 0 <= member < members", opts.Member, opts.Members)
	}
	s := &Subscription{
		c: c, prefix: prefix, opts: opts,
		out:       make(chan *SubscribeBatch, subscribeBuffer),
		done:      make(chan struct{}),
		recv:      newReceived(opts.Positions),
		yielded:   maps.Clone(opts.Positions),
		committed: maps.Clone(opts.Positions),
	}
	if s.yielded == nil {
		s.yielded, s.committed = map[string]uint64{}, map[string]uint64{}
	}
	s.opts.Positions = nil // the requests send s.recv's
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	if err := s.attach(nil, 0, time.Time{}); err != nil {
		s.cancel(errSubscriptionClosed)
		return nil, err
	}
	go s.run()
	return s, nil
}

// Batches yields the subscription's batches as they arrive. It ends when
// ctx ends (yielding that error, as Scan does), when the subscription
// fails for good (yielding the error, once), or after Close (yielding
// nothing more). Breaking out of the loop leaves the subscription running:
// a later Batches continues where this one stopped.
//
// A batch counts as yielded, for Positions and Commit, once it is handed to
// the loop body: Commit in the body after processing the batch, or later.
func (s *Subscription) Batches() iter.Seq2[*SubscribeBatch, error] {
	return func(yield func(*SubscribeBatch, error) bool) {
		for !s.closed.Load() {
			b, ok := <-s.out
			if s.closed.Load() {
				return
			}
			if !ok {
				s.mu.Lock()
				report := !s.reported && s.err != nil
				s.reported = true
				s.mu.Unlock()
				if report {
					yield(nil, s.err)
				}
				return
			}
			s.mu.Lock()
			if c, ok := s.yielded[b.Shard]; !ok || b.Cursor > c {
				s.yielded[b.Shard] = b.Cursor
			}
			s.mu.Unlock()
			if !yield(b, nil) {
				return
			}
		}
	}
}

// Commit stores, for the subscription's consumer, the cursors of every
// batch Batches has yielded so far (those that moved since the last
// Commit; none moved: nothing is sent), with the consumer generation the
// subscription reads. Call it after processing what was yielded: a
// consumer that crashes re-reads what it processed after its last Commit
// (at-least-once). It is cheap enough to call every second, and may be
// called after Close.
//
// When the consumer was reset since the subscription read its positions,
// the commit is refused with ErrConsumerReset, stores nothing, and the
// subscription ends with that error: Subscribe again to continue from the
// reset positions. Other errors: as CommitConsumer.
func (s *Subscription) Commit(ctx context.Context) error {
	if s.opts.Consumer == "" {
		return fmt.Errorf("client: Commit: the subscription to %q names no consumer", s.prefix)
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	moved := map[string]uint64{}
	for shard, cur := range s.yielded {
		if c, ok := s.committed[shard]; !ok || cur > c {
			moved[shard] = cur
		}
	}
	s.mu.Unlock()
	if len(moved) == 0 {
		return nil
	}
	// A consumer that did not exist when the subscription started is
	// created at generation 1 by the first commit: sending 1, not 0 (which
	// the server does not check), makes a commit after a reset of it
	// refused instead of undoing the reset.
	gen, err := s.c.commitConsumer(ctx, s.prefix, s.opts.Consumer, moved, max(s.generation.Load(), 1))
	if err != nil {
		if errors.Is(err, ErrConsumerReset) {
			s.cancel(err)
		}
		return err
	}
	// A consumer created by this commit (or by another member's since the
	// subscription started) has the generation the server answered with.
	s.generation.CompareAndSwap(0, gen)
	s.mu.Lock()
	for shard, cur := range moved {
		s.committed[shard] = max(s.committed[shard], cur)
	}
	s.mu.Unlock()
	return nil
}

// Positions returns the cursors of the batches Batches has yielded (and
// of SubscribeOptions.Positions for shards not yielded since): what Commit
// stores, or what to pass as SubscribeOptions.Positions to continue
// without a consumer.
func (s *Subscription) Positions() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.yielded)
}

// ConsumerGeneration is the generation of the consumer the subscription
// reads, which Commit sends; 0 without a consumer, or until the first
// commit creates it.
func (s *Subscription) ConsumerGeneration() uint64 { return s.generation.Load() }

// Close stops the stream and waits for the subscription's goroutine.
// Batches yields nothing more; Commit still stores what was yielded. It is
// idempotent.
func (s *Subscription) Close() error {
	s.closed.Store(true)
	s.cancel(errSubscriptionClosed)
	<-s.done
	return nil
}

// run is the subscription's goroutine: it receives batches until the
// subscription ends, and records why.
func (s *Subscription) run() {
	defer close(s.done)
	defer close(s.out)
	err := s.receive()
	if cause := context.Cause(s.ctx); s.ctx.Err() != nil && errors.Is(cause, ErrConsumerReset) {
		err = cause // Commit ended it
	}
	s.err = err
}

// receive delivers the stream's batches to out, opening a new stream
// after each break, until the subscription ends; it returns why.
func (s *Subscription) receive() error {
	defer func() { s.streamCancel() }()
	resp := s.first
	for {
		if b := s.recv.accept(resp); b != nil {
			select {
			case s.out <- b:
			case <-s.ctx.Done():
				return s.c.giveUp(newError(s.ctx.Err(), 1), time.Now())
			}
		}
		var err error
		if resp, err = s.stream.Recv(); err == nil {
			continue
		}
		s.streamCancel()
		if err == io.EOF {
			// The server never ends a subscription without a status.
			err = status.Errorf(codes.Internal, "the server ended the subscription to %q without a status", s.prefix)
		}
		if err := s.attach(newError(err, 1), 1, time.Now()); err != nil {
			return err
		}
		resp = s.first
	}
}

// attach opens a stream and reads its started message, after the failure
// e (nil for the first attempt) that began a run of failures at broke:
// as Scan resumes, within the retry budget since the break.
func (s *Subscription) attach(e *Error, failures int, broke time.Time) error {
	p := s.c.cfg.retry
	for {
		if e != nil && (s.ctx.Err() != nil || failures >= p.MaxAttempts || !retryable(readCall, e) || s.c.closed.Load() ||
			!s.c.resumePause(s.ctx, broke, p.backoff(failures, e.RetryDelay, jitter), transportFailure(e))) {
			return s.c.giveUp(e, broke)
		}
		err := s.open()
		if err == nil || errors.Is(err, ErrConsumerReset) {
			return err
		}
		if failures == 0 {
			broke = time.Now()
		}
		failures++
		e = newError(err, failures)
	}
}

// open opens a stream from the cursors received so far and reads its
// started message, both within the attempt timeout: a connection still
// CONNECTING holds a new stream until it is READY or fails.
func (s *Subscription) open() error {
	sctx, cancel := context.WithCancel(s.ctx)
	t := time.AfterFunc(s.c.cfg.attemptTimeout, cancel)
	stream, err := s.c.rpc.Subscribe(sctx, s.request())
	var first *rolloutv1.SubscribeResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if !t.Stop() && s.ctx.Err() == nil {
		cancel()
		return status.Errorf(codes.DeadlineExceeded, "subscribing to %q: not started within %v", s.prefix, s.c.cfg.attemptTimeout)
	}
	if err == io.EOF || (err == nil && first.GetStarted() == nil) {
		err = status.Errorf(codes.Internal, "subscribing to %q: the stream did not start with a started message", s.prefix)
	}
	if err == nil {
		err = s.checkGeneration(first.GetStarted().GetConsumerGeneration())
	}
	if err != nil {
		cancel()
		return err
	}
	// The starts a LATEST stream fixed count as received: a resume sends
	// them back, from EARLIEST (see request). They count as yielded too,
	// with nothing before them to process: a Commit stores them, so that
	// the consumer does not read a shard that sent nothing yet from its
	// first record.
	s.mu.Lock()
	for shard, c := range first.GetStarted().GetPositions() {
		if prev, ok := s.recv.at[shard]; !ok || c > prev {
			s.recv.at[shard] = c
		}
		if prev, ok := s.yielded[shard]; !ok || c > prev {
			s.yielded[shard] = c
		}
	}
	s.mu.Unlock()
	s.stream, s.streamCancel, s.first, s.opened = stream, cancel, first, true
	return nil
}

// checkGeneration takes g, the consumer generation a stream started
// reading: the subscription's first, or one that keeps it. A resumed
// stream must not silently read a consumer reset since (its generation
// moved) or deleted (0, when the subscription starts from the consumer).
func (s *Subscription) checkGeneration(g uint64) error {
	for {
		cur := s.generation.Load()
		if cur == 0 {
			// The first stream takes the generation it reads. A resume of
			// a subscription that started before its consumer existed may
			// find it created since (generation 1, by a commit), but not
			// reset since: the cursors it resumes from would undo that.
			if g > 1 && s.opened {
				return fmt.Errorf("client: the subscription to %q resumed at generation %d of consumer %q, which did not exist when it started: %w",
					s.prefix, g, s.opts.Consumer, ErrConsumerReset)
			}
			if g == 0 || s.generation.CompareAndSwap(0, g) {
				return nil
			}
			continue
		}
		fromConsumer := s.opts.Start == StartDefault || s.opts.Start == StartConsumer
		if g == cur || (g == 0 && !fromConsumer) {
			return nil
		}
		return fmt.Errorf("client: the subscription to %q resumed at generation %d of consumer %q, it read generation %d: %w",
			s.prefix, g, s.opts.Consumer, cur, ErrConsumerReset)
	}
}

// request is the SubscribeRequest of the next stream: the options, and
// the cursors received so far.
func (s *Subscription) request() *rolloutv1.SubscribeRequest {
	o := s.opts
	start := o.Start
	if start == StartLatest && s.opened {
		// Every shard the first stream started is among the cursors
		// received (its started message named them); any other shard was
		// created after the start, and LATEST reads those from the first
		// record too. Resuming from LATEST would start a shard that sent
		// nothing before the break at its last seq at the resume.
		start = StartEarliest
	}
	req := &rolloutv1.SubscribeRequest{
		Prefix: s.prefix, Start: rolloutv1.SubscribeStart(start), Consumer: o.Consumer,
		Positions: maps.Clone(s.recv.at), Member: uint32(o.Member), Members: uint32(o.Members),
		RolloutId: o.RolloutID, IncludeInTraining: o.IncludeInTraining, Role: o.Role,
	}
	if len(o.Fields) > 0 {
		req.Fields = &fieldmaskpb.FieldMask{Paths: o.Fields}
	}
	return req
}

// received holds the cursor received for each shard, and turns the
// stream's messages into batches, dropping what was received before: a
// resumed stream starts after these cursors, and anything at or below
// them that it sends again is not yielded twice.
type received struct {
	at      map[string]uint64 // shard -> cursor received
	deleted map[string]uint64 // shard -> cursor of the last deletion reported
}

func newReceived(positions map[string]uint64) received {
	at := maps.Clone(positions)
	if at == nil {
		at = map[string]uint64{}
	}
	return received{at: at, deleted: map[string]uint64{}}
}

// accept records resp's cursor and returns its batch without the records
// already received; nil when it brings nothing new (or names no shard,
// as a started message without records).
func (r *received) accept(resp *rolloutv1.SubscribeResponse) *SubscribeBatch {
	shard := resp.GetShard()
	if shard == "" {
		return nil
	}
	prev, seen := r.at[shard]
	recs := resp.GetRecords()
	if seen {
		i := 0
		for i < len(recs) && recs[i].GetSeq() <= prev {
			i++
		}
		recs = recs[i:]
	}
	cursor := max(prev, resp.GetCursor())
	if n := len(recs); n > 0 {
		cursor = max(cursor, recs[n-1].GetSeq())
	}
	deleted := resp.GetShardDeleted()
	if deleted {
		if at, ok := r.deleted[shard]; ok && at == cursor && len(recs) == 0 {
			return nil // this deletion was reported
		}
		r.deleted[shard] = cursor
	} else if seen && len(recs) == 0 && cursor == prev {
		return nil
	}
	r.at[shard] = cursor
	return &SubscribeBatch{Shard: shard, Records: recs, Cursor: cursor, Deleted: deleted}
}
