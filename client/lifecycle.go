package client

import (
	"context"
	"errors"
	"iter"

	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// The shard lifecycle: ListShards, DescribeShard, BatchGet and
// DeleteShard.

// MetadataLastSeq is the ErrorInfo metadata key of SEQ_MISMATCH's current
// last seq.
const MetadataLastSeq = "last_seq"

var (
	// ErrShardDeleted: the shard was deleted (it also matches
	// ErrNotFound). Reason SHARD_DELETED.
	ErrShardDeleted = byReason(rolloutv1.ErrorReason_SHARD_DELETED, "shard deleted")
	// ErrSeqMismatch: a conditional DeleteShard found records appended
	// since the caller looked, and deleted nothing. Reason SEQ_MISMATCH.
	// When the error also matches ErrOutcomeUnknown, that answer came to a
	// resend, and an earlier attempt may have deleted the records through
	// the expected seq before the shard was written again (see
	// DeleteShard).
	ErrSeqMismatch = byReason(rolloutv1.ErrorReason_SEQ_MISMATCH, "shard's last seq changed")
)

// ListShards returns one page of the shards under req.Prefix that the
// caller may list. It resends on UNAVAILABLE within the retry budget.
func (c *Client) ListShards(ctx context.Context, req *rolloutv1.ListShardsRequest) (*rolloutv1.ListShardsResponse, error) {
	var resp *rolloutv1.ListShardsResponse
	err := c.unary(ctx, readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.ListShards(ctx, req)
		return err
	})
	return resp, err
}

// AllShards iterates over every shard under prefix that the caller may
// list, page after page (pageSize 0: the server's default). It stops at
// the first error, which it yields.
func (c *Client) AllShards(ctx context.Context, prefix string, pageSize int32, summaries bool) iter.Seq2[*rolloutv1.ListedShard, error] {
	return func(yield func(*rolloutv1.ListedShard, error) bool) {
		req := &rolloutv1.ListShardsRequest{Prefix: prefix, PageSize: pageSize, IncludeSummary: summaries}
		for {
			resp, err := c.ListShards(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, s := range resp.GetShards() {
				if !yield(s, nil) {
					return
				}
			}
			if resp.GetNextPageToken() == "" {
				return
			}
			req.PageToken = resp.GetNextPageToken()
		}
	}
}

// DescribeShard describes the shard. Errors: ErrNotFound (never written,
// or deleted: then also ErrShardDeleted), ErrPermissionDenied, ….
func (c *Client) DescribeShard(ctx context.Context, shard string) (*rolloutv1.ShardInfo, error) {
	var resp *rolloutv1.ShardInfo
	err := c.unary(withShard(ctx, shard), readCall, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.DescribeShard(ctx, &rolloutv1.DescribeShardRequest{Shard: shard})
		return err
	})
	return resp, err
}

// BatchGet returns one result per id, in order: the record, or NotFound.
// A repeated id is asked for once; its results are the same value.
// Results the server marks over its response limit are asked for again,
// in further calls, so that none comes back over the limit. fields, when
// not empty, names the top-level Record fields to return (id and seq
// always are).
func (c *Client) BatchGet(ctx context.Context, shard string, ids []string, fields ...string) ([]*rolloutv1.BatchGetResult, error) {
	out := make([]*rolloutv1.BatchGetResult, len(ids))
	// The server answers each id once (a repeat is INVALID_ARGUMENT): ask
	// for the first occurrence of each, and copy its result to the others.
	first := make(map[string]int, len(ids))
	var todo []int // indexes into ids still to answer
	for i, id := range ids {
		if _, ok := first[id]; !ok {
			first[id] = i
			todo = append(todo, i)
		}
	}
	var mask *fieldmaskpb.FieldMask
	if len(fields) > 0 {
		mask = &fieldmaskpb.FieldMask{Paths: fields}
	}
	for len(todo) > 0 {
		req := &rolloutv1.BatchGetRequest{Shard: shard, Fields: mask, Ids: make([]string, len(todo))}
		for k, i := range todo {
			req.Ids[k] = ids[i]
		}
		var resp *rolloutv1.BatchGetResponse
		err := c.unary(withShard(ctx, shard), readCall, func(ctx context.Context) error {
			var err error
			resp, err = c.rpc.BatchGet(ctx, req)
			return err
		})
		if err != nil {
			return nil, err
		}
		var again []int
		for k, r := range resp.GetResults() {
			if k >= len(todo) {
				break
			}
			if r.GetOverLimit() && k > 0 {
				again = append(again, todo[k])
				continue
			}
			out[todo[k]] = r
		}
		if len(again) == len(todo) {
			// The server returns at least the first: never loops.
			return nil, errors.New("client: BatchGet made no progress")
		}
		todo = again
	}
	for i, id := range ids {
		out[i] = out[first[id]]
	}
	return out, nil
}

// DeleteShard deletes the shard's records; with expectedLastSeq, only if
// its last seq (ShardInfo.LastSeq) is still that.
//
// Resends: a delete resent after its first attempt landed would delete
// whatever was appended in between (the shard's next incarnation), so
// without expectedLastSeq it resends only what certainly did not take
// effect (reason NOT_COMMITTED); an attempt that may have landed (a
// connection broken or an attempt timed out, UNAVAILABLE or
// DEADLINE_EXCEEDED without a reason) is returned, and matches
// ErrOutcomeUnknown. Describe the shard and delete again with its last seq
// to finish safely.
//
// With expectedLastSeq it resends those too, because a resend cannot
// delete newer records: it finds its first attempt's tombstone and answers
// AlreadyDeleted (a delete of this call, or another's, with the same
// result: the records through expectedLastSeq are gone and the shard is
// deleted), or it finds records appended since, and answers SEQ_MISMATCH.
// That SEQ_MISMATCH, after an attempt that may have landed, cannot tell
// "nothing was deleted" from "the first attempt deleted the records
// through expectedLastSeq, and the shard was written again since": the
// error then matches both ErrSeqMismatch and ErrOutcomeUnknown. Either
// way the records appended since survive. The client never reports
// AlreadyDeleted for a shard that is live.
//
// Errors: ErrNotFound, ErrSeqMismatch, ErrOutcomeUnknown,
// ErrPermissionDenied, ….
func (c *Client) DeleteShard(ctx context.Context, shard string, expectedLastSeq *uint64) (*rolloutv1.DeleteShardResponse, error) {
	kind := deleteCall
	if expectedLastSeq != nil {
		kind = conditionalDeleteCall
	}
	var resp *rolloutv1.DeleteShardResponse
	err := c.unary(withShard(ctx, shard), kind, func(ctx context.Context) error {
		var err error
		resp, err = c.rpc.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: shard, ExpectedLastSeq: expectedLastSeq})
		return err
	})
	return resp, err
}
