package export

import (
	"time"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Row is one exported record: every rollout.v1.Record field, plus shard.
// The parquet tags are the schema; docs/export.md documents it one row per
// field, and TestSchemaDocumented keeps the two in step.
type Row struct {
	Shard             string            `parquet:"shard"`
	ID                string            `parquet:"id"`
	Seq               int64             `parquet:"seq"`
	RolloutID         string            `parquet:"rollout_id"`
	ProblemID         string            `parquet:"problem_id"`
	Dataset           string            `parquet:"dataset"`
	SequenceOrder     int32             `parquet:"sequence_order"`
	Role              string            `parquet:"role"`
	CreatedAt         *time.Time        `parquet:"created_at,optional,timestamp(microsecond)"`
	Content           string            `parquet:"content"`
	ContentType       string            `parquet:"content_type"`
	InputTokens       []int32           `parquet:"input_tokens,list" parquet-element:",delta"`
	OutputTokens      []int32           `parquet:"output_tokens,list" parquet-element:",delta"`
	OutputLogprobs    []float32         `parquet:"output_logprobs,list" parquet-element:",split"`
	RefLogprobs       []float32         `parquet:"ref_logprobs,list" parquet-element:",split"`
	LossMask          []byte            `parquet:"loss_mask"`
	Reward            *float32          `parquet:"reward,optional"`
	Advantage         *float32          `parquet:"advantage,optional"`
	Score             *float32          `parquet:"score,optional"`
	PolicyVersion     string            `parquet:"policy_version"`
	IncludeInTraining bool              `parquet:"include_in_training"`
	GraderID          string            `parquet:"grader_id"`
	Relationships     []Relationship    `parquet:"relationships,list"`
	Metadata          map[string]string `parquet:"metadata"`
	BinaryPayload     []byte            `parquet:"binary_payload"`
}

// Relationship is one element of Row.Relationships.
type Relationship struct {
	TargetID string  `parquet:"target_id"`
	Relation string  `parquet:"relation"`
	Weight   float32 `parquet:"weight"`
}

// fill sets r from rec of shard, reusing r's relationship slice. Slices
// and strings are shared with rec, not copied: r lives only until the
// writer has taken the row.
func (r *Row) fill(shard string, rec *rolloutv1.Record) {
	rels := r.Relationships[:0]
	for _, rel := range rec.GetRelationships() {
		rels = append(rels, Relationship{TargetID: rel.GetTargetId(), Relation: rel.GetRelation(), Weight: rel.GetWeight()})
	}
	var created *time.Time
	if ts := rec.GetCreatedAt(); ts != nil {
		t := ts.AsTime().Truncate(time.Microsecond)
		created = &t
	}
	*r = Row{
		Shard:             shard,
		ID:                rec.GetId(),
		Seq:               int64(rec.GetSeq()),
		RolloutID:         rec.GetRolloutId(),
		ProblemID:         rec.GetProblemId(),
		Dataset:           rec.GetDataset(),
		SequenceOrder:     rec.GetSequenceOrder(),
		Role:              rec.GetRole().String(),
		CreatedAt:         created,
		Content:           rec.GetContent(),
		ContentType:       rec.GetContentType(),
		InputTokens:       rec.GetInputTokens(),
		OutputTokens:      rec.GetOutputTokens(),
		OutputLogprobs:    rec.GetOutputLogprobs(),
		RefLogprobs:       rec.GetRefLogprobs(),
		LossMask:          rec.GetLossMask(),
		Reward:            rec.Reward,
		Advantage:         rec.Advantage,
		Score:             rec.Score,
		PolicyVersion:     rec.GetPolicyVersion(),
		IncludeInTraining: rec.GetIncludeInTraining(),
		GraderID:          rec.GetGraderId(),
		Relationships:     rels,
		Metadata:          rec.GetMetadata(),
		BinaryPayload:     rec.GetBinaryPayload(),
	}
}
