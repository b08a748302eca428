package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// The shard lifecycle RPCs: ListShards, DescribeShard, BatchGet and
// DeleteShard. Their storage work is package shard's; here they are
// validated, authorized beyond what the guard can decide (ListShards
// lists inside the caller's list grants only), and answered.

const (
	defaultListPageSize = 100
	maxListPageSize     = 1000
	// maxBatchGetIDs bounds one BatchGet.
	maxBatchGetIDs = 1000
	// summaryParallelism bounds the manifest reads of one page of summaries.
	summaryParallelism = 8
	// summarySlots bounds the summaries being read in the whole process,
	// so that many clients listing with summaries at once share a fixed
	// part of the store and the CPU instead of crowding out appends and
	// gets: the per-client listing limit alone grows with the clients.
	summarySlots = 4
	// allClients is the key of the listing limit of all clients together.
	allClients = "all clients"
)

// lifecycle is the state the lifecycle RPCs share beyond the service's.
type lifecycle struct {
	store       blob.Store
	listLimiter *ratelimit.Limiter // nil: listings cost nothing
	listTotal   *ratelimit.Limiter // the same for all clients together (key allClients)
	summaries   chan struct{}      // summarySlots; nil: no process-wide bound
	errLog      *errorLog          // the error lines each client may cause
	authz       *authz.Authorizer  // nil: no policy, every shard listed
	purger      *shard.Purger
	log         *zap.Logger
	// batchGetBytes caps one BatchGet response's record bytes.
	batchGetBytes int
}

// ListShards lists the shards under the request's prefix that the caller
// may list, a page at a time, asking the store about nothing else
// (docs/security.md, "Listing stays inside the caller's grants").
func (s *service) ListShards(ctx context.Context, req *rolloutv1.ListShardsRequest) (*rolloutv1.ListShardsResponse, error) {
	prefix := strings.TrimSuffix(req.GetPrefix(), "/")
	if prefix != "" {
		if err := validate.Shard(prefix); err != nil {
			return nil, toStatus(ctx, &validate.FieldError{Field: "prefix", Rule: "must be empty or a shard name", Detail: err.Error()})
		}
	}
	if req.GetPageSize() < 0 {
		return nil, toStatus(ctx, &validate.FieldError{Field: "page_size", Rule: "must not be negative", Detail: fmt.Sprintf("got %d", req.GetPageSize())})
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = defaultListPageSize
	case size > maxListPageSize:
		size = maxListPageSize
	}
	if limits := s.listLimits(ctx); len(limits) > 0 {
		for _, l := range limits {
			if err := l.Admit(l.key); err != nil {
				return nil, toStatus(ctx, err)
			}
		}
		var ops *atomic.Int64
		ctx, ops = countingOps(ctx)
		defer func() {
			for _, l := range limits {
				l.Charge(l.key, int(ops.Load()))
			}
		}()
	}
	identity := peerIdentity(ctx)
	opts := shard.ListOptions{Prefix: prefix, Caller: identity, Token: req.GetPageToken(), Max: size, Unrestricted: s.life.authz == nil}
	if s.life.authz != nil {
		opts.Grants = s.life.authz.Prefixes(identity, authz.List)
	}
	page, err := shard.List(ctx, s.life.store, opts)
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &rolloutv1.ListShardsResponse{NextPageToken: page.Next}
	for _, name := range page.Shards {
		resp.Shards = append(resp.Shards, &rolloutv1.ListedShard{Shard: name})
	}
	if !req.GetIncludeSummary() {
		return resp, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(summaryParallelism)
	for _, ls := range resp.Shards {
		g.Go(func() error {
			if s.life.summaries != nil {
				select {
				case s.life.summaries <- struct{}{}:
					defer func() { <-s.life.summaries }()
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			info, err := s.reader.Describe(gctx, ls.GetShard())
			switch {
			case err == nil, shardDeleted(err):
				ls.Summary = s.shardInfo(info)
			case notFound(err):
				// Its last blob went between the listing and the read.
			case ctx.Err() != nil:
				return err // the call ended, not the shard
			default:
				// One bad shard fails only itself.
				ls.SummaryError = s.summaryError(ctx, ls.GetShard(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, toStatus(ctx, err)
	}
	return resp, nil
}

// keyedLimit is a listing limit and the key a call is charged under.
type keyedLimit struct {
	*ratelimit.Limiter
	key string
}

// listLimits are the listing limits a call is charged to: its client's,
// and all clients'.
func (s *service) listLimits(ctx context.Context) []keyedLimit {
	var out []keyedLimit
	if l := s.life.listLimiter; l != nil {
		out = append(out, keyedLimit{l, ClientOf(ctx)})
	}
	if l := s.life.listTotal; l != nil {
		out = append(out, keyedLimit{l, allClients})
	}
	return out
}

// summaryError is a shard's summary failure as DescribeShard would answer
// it, "Code: message": a text that may carry the server's internals is
// withheld and logged under the call's request id, within the client's
// error-line rate.
func (s *service) summaryError(ctx context.Context, shardName string, err error) string {
	st := toStatus(ctx, err)
	var ie *internalError
	if errors.As(st, &ie) {
		id := callFrom(ctx).id
		if ok, extra := s.life.errLog.allow(ClientOf(ctx)); ok {
			s.life.log.Warn("shard summary withheld from the client", append(extra, clientString("shard", shardName),
				zap.String("request_id", id), zap.String("code", ie.f.code.String()), boundedString("error", ie.detail(), maxLoggedError))...)
		}
		return ie.f.code.String() + ": " + ie.f.status(id).Message()
	}
	sts := status.Convert(st)
	return sts.Code().String() + ": " + sts.Message()
}

// DescribeShard describes one shard from its current manifest.
func (s *service) DescribeShard(ctx context.Context, req *rolloutv1.DescribeShardRequest) (*rolloutv1.ShardInfo, error) {
	if err := validate.Shard(req.GetShard()); err != nil {
		return nil, toStatus(ctx, err)
	}
	info, err := s.reader.Describe(ctx, req.GetShard())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return s.shardInfo(info), nil
}

func (s *service) shardInfo(info shard.Info) *rolloutv1.ShardInfo {
	out := &rolloutv1.ShardInfo{
		Shard:       info.Shard,
		LastSeq:     info.LastSeq,
		Incarnation: info.Incarnation,
		Deleted:     info.Deleted,
	}
	if info.Deleted {
		out.DeletedAt = timestamp(info.DeletedAt)
		return out
	}
	out.Records = info.Records
	out.Bytes = info.Bytes
	out.Generations = uint32(info.Generations)
	out.FirstSeq = info.FirstSeq
	out.Epoch = info.Epoch
	out.FormatVersion = info.FormatVersion
	out.WriterHere = s.writers.holds(info.Shard)
	out.CreatedAt = timestamp(info.Created)
	out.LastCommitAt = timestamp(info.LastCommit)
	return out
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// BatchGet reads many records of one shard with one manifest read.
func (s *service) BatchGet(ctx context.Context, req *rolloutv1.BatchGetRequest) (*rolloutv1.BatchGetResponse, error) {
	if err := validate.Shard(req.GetShard()); err != nil {
		return nil, toStatus(ctx, err)
	}
	ids := req.GetIds()
	switch {
	case len(ids) == 0:
		return nil, toStatus(ctx, &validate.FieldError{Field: "ids", Rule: "must name at least one id"})
	case len(ids) > maxBatchGetIDs:
		return nil, toStatus(ctx, &validate.FieldError{Field: "ids", Rule: fmt.Sprintf("must name at most %d ids", maxBatchGetIDs), Detail: fmt.Sprintf("got %d", len(ids))})
	}
	first := make(map[string]int, len(ids))
	for i, id := range ids {
		if err := validate.RecordID(id); err != nil {
			return nil, toStatus(ctx, &validate.FieldError{Field: fmt.Sprintf("ids[%d]", i), Rule: "must be a record id", Detail: err.Error()})
		}
		// Each id is answered once: a repeat would send its record again,
		// and 1000 repeats of one large record built a response of
		// gigabytes (see BatchGetRequest.ids).
		if j, ok := first[id]; ok {
			return nil, toStatus(ctx, &validate.FieldError{Field: fmt.Sprintf("ids[%d]", i), Rule: "must not repeat an id", Detail: fmt.Sprintf("ids[%d] names it too", j)})
		}
		first[id] = i
	}
	project, err := projection(req.GetFields())
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	res, err := s.reader.BatchGet(ctx, req.GetShard(), ids, shard.BatchGetOptions{MaxBytes: batchGetRecordBytes(s.life.batchGetBytes, ids), Project: project})
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	resp := &rolloutv1.BatchGetResponse{Results: make([]*rolloutv1.BatchGetResult, len(ids))}
	for i, r := range res {
		out := &rolloutv1.BatchGetResult{Id: ids[i]}
		switch {
		case r.Record != nil:
			out.Result = &rolloutv1.BatchGetResult_Record{Record: r.Record}
		case r.OverLimit:
			out.Result = &rolloutv1.BatchGetResult_OverLimit{OverLimit: true}
		default:
			out.Result = &rolloutv1.BatchGetResult_NotFound{NotFound: true}
		}
		resp.Results[i] = out
	}
	return resp, nil
}

// batchGetRecordBytes is the record bytes a BatchGet of ids may return
// for its response to stay within capBytes: what the response adds to each
// record is taken off the cap first, so that the cap counts the bytes sent.
// The first record found is returned whatever its size.
func batchGetRecordBytes(capBytes int, ids []string) int {
	if capBytes <= 0 {
		capBytes = DefaultBatchGetBytes
	}
	for _, id := range ids {
		capBytes -= batchGetResultOverhead(len(id))
	}
	return max(capBytes, 1)
}

// batchGetResultOverhead bounds what one BatchGetResult adds to its record
// in a BatchGetResponse: the result's tag and length (1+3), its id (1+1+n,
// an id being at most 128 bytes), and the record's tag and length (1+4).
func batchGetResultOverhead(idLen int) int { return (1 + 3) + (1 + 1 + idLen) + (1 + 4) }

// DeleteShard writes the shard's tombstone, retires this instance's writer
// of it, and hands reclaiming the old blobs to the purger: the delete has
// taken effect when it returns, the storage is reclaimed after.
func (s *service) DeleteShard(ctx context.Context, req *rolloutv1.DeleteShardRequest) (*rolloutv1.DeleteShardResponse, error) {
	if err := validate.Shard(req.GetShard()); err != nil {
		return nil, toStatus(ctx, err)
	}
	d, err := shard.Delete(ctx, s.life.store, req.GetShard(), shard.DeleteOptions{ExpectedLastSeq: req.ExpectedLastSeq, Clock: s.clock})
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	// The tombstone fenced it already; retiring it now saves its next
	// append a failed commit.
	s.writers.retireShard(req.GetShard(), fmt.Errorf("shard %q: %w", req.GetShard(), shard.ErrShardDeleted))
	s.life.purger.Start(req.GetShard(), d.ThroughEpoch)
	s.life.log.Info("shard deleted", zap.String("shard", req.GetShard()), zap.Uint64("epoch", d.ThroughEpoch),
		zap.Uint64("incarnation", d.Incarnation), zap.Uint64("last_seq", d.LastSeq), zap.Uint64("records", d.Records),
		zap.Bool("already_deleted", d.AlreadyDeleted), zap.String("identity", peerIdentity(ctx)))
	return &rolloutv1.DeleteShardResponse{LastSeq: d.LastSeq, Records: d.Records, AlreadyDeleted: d.AlreadyDeleted, Incarnation: d.Incarnation}, nil
}

// holds reports whether this instance holds a live writer of the shard.
func (s *writerSet) holds(shardName string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.byShard[shardName]
	return ok && !h.dead
}

// retireShard retires this instance's writer of the shard, if any: it is
// aborted at its last unpin, and the next append opens a new one.
func (s *writerSet) retireShard(shardName string, cause error) {
	s.mu.Lock()
	h, ok := s.byShard[shardName]
	if ok {
		h.pins++ // retire and release want a pin
	}
	s.mu.Unlock()
	if ok {
		s.retire(h, cause)
		s.release(h)
	}
}

func shardDeleted(err error) bool { return errors.Is(err, shard.ErrShardDeleted) }

func notFound(err error) bool { return errors.Is(err, shard.ErrShardNotFound) }
