package validate

import (
	"testing"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// rolloutRecord is a record as RL rollouts send them: a logprob per output
// token, from the policy and the reference.
func rolloutRecord(tokens int) *rolloutv1.Record {
	r := goodRecord()
	r.OutputTokens = make([]int32, tokens)
	r.OutputLogprobs = make([]float32, tokens)
	r.RefLogprobs = make([]float32, tokens)
	r.LossMask = make([]byte, tokens)
	return r
}

// A valid request is checked without building the field names its errors
// would carry: "records[i].output_logprobs[j]" was built for every logprob
// of every record, and each shard segment was split out.
func TestValidRecordAllocatesNothing(t *testing.T) {
	req := &rolloutv1.AppendRequest{Shard: "team-a/run1", Records: []*rolloutv1.Record{rolloutRecord(1024)}}
	// One allocation: reflection's view of the relationships list. Before
	// the fix: 3,908.
	if allocs := testing.AllocsPerRun(20, func() {
		if err := AppendRequest(req); err != nil {
			t.Fatal(err)
		}
	}); allocs > 1 {
		t.Errorf("a valid Append of one 1,024-token record costs %v allocations, want at most 1", allocs)
	}
}

// BenchmarkAppendRequest checks one Append of a 1,024-token record.
func BenchmarkAppendRequest(b *testing.B) {
	req := &rolloutv1.AppendRequest{Shard: "team-a/run1", Records: []*rolloutv1.Record{rolloutRecord(1024)}}
	b.ReportAllocs()
	for b.Loop() {
		if err := AppendRequest(req); err != nil {
			b.Fatal(err)
		}
	}
}
