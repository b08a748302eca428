package subscribe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/consumer"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// Start says where a subscription starts each shard (rollout.v1.SubscribeStart).
type Start int

const (
	// StartDefault: the consumer's positions when it exists, else earliest.
	StartDefault Start = iota
	// StartEarliest: every shard from its first record.
	StartEarliest
	// StartLatest: each shard that exists at the start after its last seq
	// then; shards created later from their first record.
	StartLatest
	// StartConsumer: the consumer's positions; ErrConsumerNotFound
	// without them.
	StartConsumer
)

// Request is one subscription.
type Request struct {
	// Prefix covers shards on whole segments; "" covers every shard.
	Prefix   string
	Start    Start
	Consumer string
	// Positions override the start of the shards they name (shard ->
	// cursor): each must lie under Prefix.
	Positions map[string]uint64
	// Member of Members reads the shards Takes gives it.
	Member, Members uint32
	// Scan selects and shapes what is delivered (Filter, Project, Raw,
	// BatchRecords, BatchBytes). AfterSeq, Limit, Follow, Notifier,
	// ReadBytes and the polling bounds are the engine's.
	Scan shard.ScanOptions
}

// Message is one message of a subscription.
type Message struct {
	// Started opens the stream, once the starting positions are fixed,
	// with the consumer's generation (0 without one).
	Started            bool
	ConsumerGeneration uint64
	// Shard's batch: records (or Raw) and the cursor to resume from.
	Shard string
	Batch shard.Batch
	// Deleted: Shard was deleted; Batch.Cursor is where the subscription
	// goes on watching it from.
	Deleted bool
}

// check validates r; it returns r's prefix without a trailing '/'.
func (r *Request) check() (string, error) {
	prefix := strings.TrimSuffix(r.Prefix, "/")
	if prefix != "" {
		if err := validate.Shard(prefix); err != nil {
			return "", &validate.FieldError{Field: "prefix", Rule: "must be empty or a shard name", Detail: err.Error()}
		}
	}
	if r.Start < StartDefault || r.Start > StartConsumer {
		return "", &validate.FieldError{Field: "start", Rule: "must be a SubscribeStart", Detail: fmt.Sprintf("got %d", r.Start)}
	}
	if r.Consumer != "" {
		if err := consumer.ValidateName("consumer", r.Consumer); err != nil {
			return "", err
		}
	} else if r.Start == StartConsumer {
		return "", &validate.FieldError{Field: "consumer", Rule: "required with SUBSCRIBE_START_CONSUMER"}
	}
	if r.Member >= max(r.Members, 1) {
		return "", &validate.FieldError{Field: "member", Rule: "must be below members", Detail: fmt.Sprintf("got member %d of %d", r.Member, r.Members)}
	}
	for s := range r.Positions {
		if err := validate.Shard(s); err != nil {
			return "", &validate.FieldError{Field: "positions", Rule: "keys must be shard names", Detail: err.Error()}
		}
		if !validate.Covers(prefix, s) {
			return "", &validate.FieldError{Field: "positions", Rule: "keys must lie under prefix", Detail: fmt.Sprintf("shard %q is not under prefix %q", s, prefix)}
		}
	}
	return prefix, nil
}

// subscription is one running Subscribe: a follower goroutine per shard of
// its share, each sending through send, one message at a time.
type subscription struct {
	e      *Engine
	req    *Request
	prefix string
	ctx    context.Context
	slots  chan struct{} // shared by its followers (follow.Set.ScanSlots)
	log    *zap.Logger

	sendMu sync.Mutex
	send   func(Message) error

	mu        sync.Mutex
	fail      func(error) // records the first fatal error and ends the subscription
	start     map[string]uint64
	shards    map[string]bool // followed or pending
	pending   []string        // found before the start was fixed
	begun     bool            // followers may start
	ending    bool            // no follower starts any more
	followers sync.WaitGroup
}

// Subscribe runs a subscription until ctx ends or it fails, sending its
// messages through send, one at a time: first a Started one, once every
// starting position is fixed; then batches and deletions of the shards of
// its share, each shard in seq order. It returns ctx's error, send's, a
// validation error (validate.ErrInvalid), ErrConsumerNotFound,
// ErrConsumersUnavailable, ErrClosed, or a storage or corruption error
// that a shard's reads met and retrying does not get past.
func (e *Engine) Subscribe(ctx context.Context, req Request, send func(Message) error) error {
	prefix, err := req.check()
	if err != nil {
		return err
	}
	positions, generation, err := e.consumer(ctx, prefix, &req)
	if err != nil {
		return err
	}
	w, err := e.acquire(prefix)
	if err != nil {
		return err
	}
	defer e.release(w)
	e.subscriptions.Add(1)
	defer e.subscriptions.Add(-1)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &subscription{e: e, req: &req, prefix: prefix, ctx: ctx, slots: make(chan struct{}, e.opts.Slots), send: send,
		fail: cancel, start: positions, shards: map[string]bool{},
		log: e.log.With(zap.String("prefix", prefix), zap.String("consumer", req.Consumer))}
	for sh, c := range req.Positions {
		s.start[sh] = c
	}
	listed, err := w.join(ctx, s)
	if err != nil {
		return err
	}
	defer w.leave(s)
	if req.Start == StartLatest {
		if err := s.latest(listed); err != nil {
			return err
		}
	}
	if err := s.emit(Message{Started: true, ConsumerGeneration: generation}); err != nil {
		return err
	}
	for _, sh := range listed {
		s.add(sh)
	}
	s.mu.Lock()
	s.begun = true
	for _, sh := range s.pending {
		s.followLocked(sh)
	}
	s.pending = nil
	s.mu.Unlock()

	<-ctx.Done()
	s.mu.Lock()
	s.ending = true
	s.mu.Unlock()
	s.followers.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // a follower failed
	}
	return ctx.Err()
}

// consumer returns the starting positions from the named consumer (a copy
// the caller may modify) and its generation.
func (e *Engine) consumer(ctx context.Context, prefix string, req *Request) (map[string]uint64, uint64, error) {
	positions := map[string]uint64{}
	if req.Consumer == "" {
		return positions, 0, nil
	}
	if e.opts.ConsumerPositions == nil {
		return nil, 0, fmt.Errorf("consumer %q: %w", req.Consumer, ErrConsumersUnavailable)
	}
	stored, generation, found, err := e.opts.ConsumerPositions(ctx, prefix, req.Consumer)
	switch {
	case err != nil:
		return nil, 0, fmt.Errorf("load consumer %q of prefix %q: %w", req.Consumer, prefix, err)
	case !found && req.Start == StartConsumer:
		return nil, 0, fmt.Errorf("%w: %q under prefix %q has no stored positions", ErrConsumerNotFound, req.Consumer, prefix)
	}
	// With EARLIEST or LATEST the consumer's positions are not used, but
	// its generation is reported: commits made for it after a reset are
	// refused all the same.
	if found && (req.Start == StartDefault || req.Start == StartConsumer) {
		for sh, c := range stored {
			if validate.Covers(prefix, sh) {
				positions[sh] = c
			}
		}
	}
	return positions, generation, nil
}

// latest fixes the start of each listed shard of the share that no
// request position names at its last seq now.
func (s *subscription) latest(listed []string) error {
	g, ctx := errgroup.WithContext(s.ctx)
	g.SetLimit(s.e.opts.DescribeParallelism)
	var mu sync.Mutex
	for _, sh := range listed {
		if _, ok := s.req.Positions[sh]; ok || !Takes(sh, s.req.Member, s.req.Members) {
			continue
		}
		g.Go(func() error {
			info, err := s.e.reader.Describe(ctx, sh)
			switch {
			case err == nil, errors.Is(err, shard.ErrShardDeleted):
				// A deleted shard's next incarnation continues above it.
			case errors.Is(err, shard.ErrShardNotFound):
				return nil // blobs without a manifest yet: from its first record
			default:
				return fmt.Errorf("shard %q: the last seq to start after: %w", sh, err)
			}
			mu.Lock()
			s.start[sh] = info.LastSeq
			mu.Unlock()
			return nil
		})
	}
	return g.Wait()
}

// add follows shard if it is of the share and not followed yet: at once,
// or, before the start is fixed, once it is.
func (s *subscription) add(sh string) {
	if !Takes(sh, s.req.Member, s.req.Members) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ending || s.shards[sh] {
		return
	}
	s.shards[sh] = true
	if !s.begun {
		s.pending = append(s.pending, sh)
		return
	}
	s.followLocked(sh)
}

// followLocked starts shard's follower. s.mu is held.
func (s *subscription) followLocked(sh string) {
	cursor := s.start[sh]
	s.followers.Go(func() {
		if err := s.follow(sh, cursor); err != nil && s.ctx.Err() == nil {
			s.fail(err)
		}
	})
}

// Backoff of a shard whose reads fail in a way retrying may get past.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 10 * time.Second
)

// follow delivers shard's records after cursor until the subscription
// ends, through the engine's shared reader of the shard.
//
// A deleted shard is reported, and followed on from the same cursor by a
// new follower, which waits on the tombstone and reads the next
// incarnation: that is safe because a shard's seqs continue above every
// seq of its deleted incarnations (shard.Delete keeps next_seq in the
// tombstone), so the new incarnation's records all lie after any cursor
// of the old one. Restoring a backup that lowers a shard's seqs breaks
// that, which is why it requires resetting the consumers of the shard.
func (s *subscription) follow(sh string, cursor uint64) error {
	backoff := retryMin
	for {
		opts := s.req.Scan
		opts.AfterSeq, opts.Limit, opts.Follow, opts.Notifier = cursor, 0, true, nil
		err := s.e.set.ScanSlots(s.ctx, sh, opts, s.slots, func(b shard.Batch) error {
			if err := s.emit(Message{Shard: sh, Batch: b}); err != nil {
				return err
			}
			cursor, backoff = b.Cursor, retryMin
			return nil
		})
		switch {
		case s.ctx.Err() != nil:
			return s.ctx.Err()
		case errors.Is(err, shard.ErrShardDeleted):
			s.log.Debug("subscribed shard deleted", zap.String("shard", sh), zap.Uint64("cursor", cursor))
			if err := s.emit(Message{Shard: sh, Deleted: true, Batch: shard.Batch{Cursor: cursor}}); err != nil {
				return err
			}
		case errors.Is(err, blob.ErrUnavailable):
			s.log.Info("subscribed shard unreadable for now; retrying", zap.String("shard", sh), zap.Duration("backoff", backoff), zap.Error(err))
			t := time.NewTimer(backoff)
			select {
			case <-s.ctx.Done():
			case <-t.C:
			}
			t.Stop()
			backoff = min(2*backoff, retryMax)
		default:
			return fmt.Errorf("shard %q: %w", sh, err)
		}
	}
}

// emit sends one message; one at a time.
func (s *subscription) emit(m Message) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.ctx.Err(); err != nil {
		return err
	}
	return s.send(m)
}
