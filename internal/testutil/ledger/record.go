package ledger

import (
	"context"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Record is the record the suites append for id: its content names the id,
// so a read-back can be checked against it.
func Record(id string) *rolloutv1.Record {
	return &rolloutv1.Record{Id: id, RolloutId: "r-" + id, Content: Content(id), OutputTokens: []int32{1, 2, 3}, LossMask: []byte{1, 0, 1}}
}

// Content is Record(id)'s content.
func Content(id string) string { return "content of " + id }

// AppendRequest appends Record(id) for each id to shard.
func AppendRequest(shard string, ids ...string) *rolloutv1.AppendRequest {
	req := &rolloutv1.AppendRequest{Shard: shard}
	for _, id := range ids {
		req.Records = append(req.Records, Record(id))
	}
	return req
}

// AppendOne appends Record(id) to shard through c and returns its result.
func AppendOne(ctx context.Context, c rolloutv1.RolloutServiceClient, shard, id string) (*rolloutv1.AppendResult, error) {
	resp, err := c.Append(ctx, AppendRequest(shard, id))
	if err != nil {
		return nil, err
	}
	return resp.GetResults()[0], nil
}
