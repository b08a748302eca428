package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/consumer"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// The consumer RPCs: CommitConsumer, DescribeConsumer, ListConsumers,
// ResetConsumer and DeleteConsumer. The positions are package consumer's;
// here the requests are validated, the lag and LATEST are computed from
// the shards' tails, and the answers built. The guard has checked the verb
// on the whole prefix (guard.go), except ListConsumers', which lists only
// the consumers the caller may scan.

const (
	// maxLagShards bounds the shards one DescribeConsumer computes the lag
	// over: the first ones under the prefix in listing order. A shard whose
	// tail this instance does not know costs a manifest read.
	maxLagShards = 1000
	// maxLatestShards bounds the shards a reset to LATEST positions.
	maxLatestShards = 10_000
	// maxConsumerPageSize bounds a ListConsumers page: each consumer
	// listed is one read.
	maxConsumerPageSize = 1000
)

// tailKnower knows the last seqs of shards without reading storage: the
// subscriptions' shared readers do. Lag and LATEST ask it first, and read
// the manifests of the shards it does not know.
type tailKnower interface {
	// LastSeq is the highest seq of shard the knower has seen committed;
	// false when it does not follow the shard.
	LastSeq(shard string) (uint64, bool)
}

// consumers is the state the consumer RPCs share beyond the service's.
type consumers struct {
	store *consumer.Store
	tails tailKnower // nil: every tail is read from the manifests
}

func consumerKey(prefix, name string) (consumer.Key, error) {
	return consumer.Key{Prefix: prefix, Name: name}.Normalize()
}

// CommitConsumer merges positions into a consumer's stored ones.
func (s *service) CommitConsumer(ctx context.Context, req *rolloutv1.CommitConsumerRequest) (*rolloutv1.CommitConsumerResponse, error) {
	k, err := consumerKey(req.GetPrefix(), req.GetConsumer())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	c, err := s.cons.store.Commit(ctx, k, req.GetPositions(), req.GetGeneration())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	s.metrics.consumers.committed(k.String())
	if tails := s.metrics.consumers.knownTails(k.String()); tails != nil {
		lag, _ := lagOf(c.Positions, s.refresh(tails))
		s.metrics.consumers.setLag(k.String(), lag, nil)
	}
	return &rolloutv1.CommitConsumerResponse{Generation: c.Generation}, nil
}

// DescribeConsumer answers a consumer's positions and lag.
func (s *service) DescribeConsumer(ctx context.Context, req *rolloutv1.DescribeConsumerRequest) (*rolloutv1.ConsumerInfo, error) {
	k, err := consumerKey(req.GetPrefix(), req.GetConsumer())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	c, err := s.cons.store.Load(ctx, k)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	// The lag lists the prefix and reads manifests: charged as a listing.
	ctx, done, err := s.chargeListing(ctx)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	defer done()
	tails, _, err := s.shardTails(ctx, k.Prefix, maxLagShards)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	info := consumerInfo(c, req.GetIncludePositions())
	lag, lagging := lagOf(c.Positions, tails)
	info.LagRecords, info.LaggingShards = lag, uint32(lagging)
	s.metrics.consumers.setLag(k.String(), lag, tails)
	return info, nil
}

// ListConsumers lists the consumers under a prefix that the caller may
// scan.
func (s *service) ListConsumers(ctx context.Context, req *rolloutv1.ListConsumersRequest) (*rolloutv1.ListConsumersResponse, error) {
	prefix, err := consumer.NormalizePrefix("prefix", req.GetPrefix())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	if req.GetPageSize() < 0 {
		return nil, toStatus(ctx, &validate.FieldError{Field: "page_size", Rule: "must not be negative", Detail: fmt.Sprintf("got %d", req.GetPageSize())})
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultListPageSize
	case size > maxConsumerPageSize:
		size = maxConsumerPageSize
	}
	ctx, done, err := s.chargeListing(ctx)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	defer done()
	identity := peerIdentity(ctx)
	opts := consumer.ListOptions{Prefix: prefix, Caller: identity, Token: req.GetPageToken(), Max: size, Unrestricted: s.life.authz == nil}
	if s.life.authz != nil {
		opts.Grants = s.life.authz.Prefixes(identity, authz.Scan)
	}
	page, err := s.cons.store.ListIn(ctx, opts)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &rolloutv1.ListConsumersResponse{NextPageToken: page.Next}
	for _, c := range page.Consumers {
		resp.Consumers = append(resp.Consumers, consumerInfo(c, false))
	}
	return resp, nil
}

// ResetConsumer sets a consumer's positions and starts its next
// generation.
func (s *service) ResetConsumer(ctx context.Context, req *rolloutv1.ResetConsumerRequest) (*rolloutv1.ResetConsumerResponse, error) {
	k, err := consumerKey(req.GetPrefix(), req.GetConsumer())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	var positions map[string]uint64
	switch to := req.GetTo(); {
	case to == rolloutv1.SubscribeStart_SUBSCRIBE_START_UNSPECIFIED && len(req.GetPositions()) == 0:
		return nil, toStatus(ctx, &validate.FieldError{Field: "to", Rule: "must be SUBSCRIBE_START_EARLIEST or SUBSCRIBE_START_LATEST when positions is empty"})
	case to == rolloutv1.SubscribeStart_SUBSCRIBE_START_UNSPECIFIED:
		positions = req.GetPositions()
	case len(req.GetPositions()) > 0:
		return nil, toStatus(ctx, &validate.FieldError{Field: "positions", Rule: "must be empty when to is set", Detail: "got to " + to.String()})
	case to == rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST:
	case to == rolloutv1.SubscribeStart_SUBSCRIBE_START_LATEST:
		lctx, done, err := s.chargeListing(ctx)
		if err != nil {
			return nil, toStatus(ctx, err)
		}
		tails, more, err := s.shardTails(lctx, k.Prefix, maxLatestShards)
		done()
		if err != nil {
			return nil, toStatus(ctx, err)
		}
		if more {
			return nil, toStatus(ctx, fmt.Errorf("%w: prefix %q holds more than %d shards, the most a reset to LATEST reads; reset with positions, or use consumers of narrower prefixes",
				consumer.ErrTooManyPositions, k.Prefix, maxLatestShards))
		}
		positions = make(map[string]uint64, len(tails))
		for sh, t := range tails {
			if t.last > 0 {
				positions[sh] = t.last
			}
		}
	default:
		return nil, toStatus(ctx, &validate.FieldError{Field: "to", Rule: "must be SUBSCRIBE_START_EARLIEST, SUBSCRIBE_START_LATEST or unspecified", Detail: "got " + to.String()})
	}
	c, err := s.cons.store.Reset(ctx, k, positions)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	s.life.log.Info("consumer reset", zap.String("consumer", k.String()), zap.String("prefix", k.Prefix),
		zap.Uint64("generation", c.Generation), zap.String("to", req.GetTo().String()), clientString("identity", peerIdentity(ctx)))
	return &rolloutv1.ResetConsumerResponse{Consumer: consumerInfo(c, true)}, nil
}

// DeleteConsumer deletes a consumer.
func (s *service) DeleteConsumer(ctx context.Context, req *rolloutv1.DeleteConsumerRequest) (*rolloutv1.DeleteConsumerResponse, error) {
	k, err := consumerKey(req.GetPrefix(), req.GetConsumer())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	if err := s.cons.store.Delete(ctx, k); err != nil {
		return nil, toStatus(ctx, err)
	}
	s.life.log.Info("consumer deleted", zap.String("consumer", k.String()), zap.String("prefix", k.Prefix),
		clientString("identity", peerIdentity(ctx)))
	s.metrics.consumers.forget(k.String())
	return &rolloutv1.DeleteConsumerResponse{}, nil
}

func consumerInfo(c *consumer.Consumer, positions bool) *rolloutv1.ConsumerInfo {
	info := &rolloutv1.ConsumerInfo{
		Prefix:     c.Prefix,
		Consumer:   c.Name,
		Generation: c.Generation,
		Shards:     uint32(len(c.Positions)),
		CreatedAt:  timestamp(c.CreatedAt),
		UpdatedAt:  timestamp(c.UpdatedAt),
	}
	if positions {
		info.Positions = c.Positions
	}
	return info
}

// chargeListing charges the call to the listing limits, as ListShards is:
// by the store operations it causes. done charges them.
func (s *service) chargeListing(ctx context.Context) (context.Context, func(), error) {
	limits := s.listLimits(ctx)
	if len(limits) == 0 {
		return ctx, func() {}, nil
	}
	for _, l := range limits {
		if err := l.Admit(l.key); err != nil {
			return ctx, nil, err
		}
	}
	var ops *atomic.Int64
	ctx, ops = countingOps(ctx)
	return ctx, func() {
		for _, l := range limits {
			l.Charge(l.key, int(ops.Load()))
		}
	}, nil
}

// tail is what is known of a shard's seqs: its last, and its first live
// one (0 when unknown, as from a tailKnower).
type tail struct{ first, last uint64 }

// shardTails returns the tails of the first limit shards under prefix (in
// listing order), each from the tailKnower when it knows the shard, else
// from the shard's manifest, and whether the prefix holds more shards. A
// deleted shard has no tail (its records are gone). A shard that fails to
// describe is left out and logged: one bad shard does not fail the call.
func (s *service) shardTails(ctx context.Context, prefix string, limit int) (map[string]tail, bool, error) {
	var names []string
	token := ""
	more := false
	for {
		page, err := shard.ListShards(ctx, s.life.store, prefix, token, min(maxListPageSize, limit-len(names)+1))
		if err != nil {
			return nil, false, err
		}
		names = append(names, page.Shards...)
		if len(names) > limit {
			names, more = names[:limit], true
			break
		}
		if page.Next == "" {
			break
		}
		token = page.Next
	}
	tails := make(map[string]tail, len(names))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(summaryParallelism)
	for _, name := range names {
		if s.cons.tails != nil {
			if last, ok := s.cons.tails.LastSeq(name); ok {
				mu.Lock() // the goroutines below write tails too
				tails[name] = tail{last: last}
				mu.Unlock()
				continue
			}
		}
		g.Go(func() error {
			if s.life.summaries != nil {
				select {
				case s.life.summaries <- struct{}{}:
					defer func() { <-s.life.summaries }()
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			info, err := s.reader.Describe(gctx, name)
			switch {
			case err == nil:
				mu.Lock()
				tails[name] = tail{first: info.FirstSeq, last: info.LastSeq}
				mu.Unlock()
			case shardDeleted(err), notFound(err):
			case ctx.Err() != nil:
				return err
			default:
				s.life.log.Warn("consumer lag: shard not described", zap.String("shard", name), zap.Error(err))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, false, err
	}
	return tails, more, nil
}

// refresh returns tails with the last seqs the tailKnower knows now.
func (s *service) refresh(tails map[string]tail) map[string]tail {
	if s.cons.tails == nil {
		return tails
	}
	out := make(map[string]tail, len(tails))
	for sh, t := range tails {
		if last, ok := s.cons.tails.LastSeq(sh); ok && last > t.last {
			t.last = last
		}
		out[sh] = t
	}
	return out
}

// lagOf is the records of tails past positions, and the shards that have
// any. A shard without a position counts all its records; a shard re-created
// after a delete counts from its first live seq when that is known.
func lagOf(positions map[string]uint64, tails map[string]tail) (records uint64, shards int) {
	for sh, t := range tails {
		from := positions[sh]
		if t.first > 0 && from < t.first-1 {
			from = t.first - 1
		}
		if t.last > from {
			records += t.last - from
			shards++
		}
	}
	return records, shards
}
