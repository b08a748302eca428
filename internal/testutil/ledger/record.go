package ledger

import rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"

// Record is the record the suites append for id: its content names the id,
// so a read-back can be checked against it.
func Record(id string) *rolloutv1.Record {
	return &rolloutv1.Record{Id: id, RolloutId: "r-" + id, Content: Content(id), OutputTokens: []int32{1, 2, 3}, LossMask: []byte{1, 0, 1}}
}

// Content is Record(id)'s content.
func Content(id string) string { return "content of " + id }
