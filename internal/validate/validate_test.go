package validate

import (
	"errors"
	"fmt"
	"math"
	"testing"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"google.golang.org/protobuf/proto"
)

func f32(v float64) *float32 { x := float32(v); return &x }

// goodRecord returns a record that passes every check, with every checked
// field set.
func goodRecord() *rolloutv1.Record {
	return &rolloutv1.Record{
		Id:             "r-1",
		OutputTokens:   []int32{1, 2, 3},
		OutputLogprobs: []float32{-0.1, -2, 0},
		RefLogprobs:    []float32{-0.2, -1.5, -float32(math.MaxFloat32)},
		LossMask:       []byte{1, 0, 1},
		Reward:         f32(1),
		Advantage:      f32(-0.5),
		Score:          f32(0),
		Role:           rolloutv1.Role_ROLE_ARTIFACT,
		Relationships: []*rolloutv1.Relationship{
			{TargetId: "r-0", Relation: "reply_to", Weight: 1},
			{TargetId: "r-0", Relation: "grades", Weight: -0.5},
		},
	}
}

func TestRecord(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(r *rolloutv1.Record)
		field  string // "" means valid
		rule   string
		detail string
	}{
		{"valid", func(*rolloutv1.Record) {}, "", "", ""},
		{"empty id is assigned by the server", func(r *rolloutv1.Record) { r.Id = "" }, "", "", ""},
		{"no mask", func(r *rolloutv1.Record) { r.LossMask = nil }, "", "", ""},
		{"no floats", func(r *rolloutv1.Record) {
			r.Reward, r.Advantage, r.Score, r.OutputLogprobs, r.RefLogprobs = nil, nil, nil, nil, nil
		}, "", "", ""},
		{"logprobs need not match token count", func(r *rolloutv1.Record) { r.RefLogprobs = nil }, "", "", ""},

		{"bad id", func(r *rolloutv1.Record) { r.Id = "a/b" },
			"records[2].id", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'", `got "/" at byte 1`},
		{"NaN reward", func(r *rolloutv1.Record) { r.Reward = f32(math.NaN()) },
			"records[2].reward", "must be finite", "got NaN"},
		{"+Inf advantage", func(r *rolloutv1.Record) { r.Advantage = f32(math.Inf(1)) },
			"records[2].advantage", "must be finite", "got +Inf"},
		{"-Inf score", func(r *rolloutv1.Record) { r.Score = f32(math.Inf(-1)) },
			"records[2].score", "must be finite", "got -Inf"},
		{"NaN output logprob", func(r *rolloutv1.Record) { r.OutputLogprobs[1] = float32(math.NaN()) },
			"records[2].output_logprobs[1]", "must be finite", "got NaN"},
		{"-Inf ref logprob", func(r *rolloutv1.Record) { r.RefLogprobs[2] = float32(math.Inf(-1)) },
			"records[2].ref_logprobs[2]", "must be finite", "got -Inf"},
		{"short mask", func(r *rolloutv1.Record) { r.LossMask = []byte{1} },
			"records[2].loss_mask", "must be empty or have one byte per output token", "got 1 bytes for 3 output_tokens"},
		{"mask without tokens", func(r *rolloutv1.Record) { r.OutputTokens = nil },
			"records[2].loss_mask", "must be empty or have one byte per output token", "got 3 bytes for 0 output_tokens"},
		{"mask byte not 0 or 1", func(r *rolloutv1.Record) { r.LossMask[2] = '1' },
			"records[2].loss_mask[2]", "must be 0 or 1", "got 49"},
		{"unknown role", func(r *rolloutv1.Record) { r.Role = 99 },
			"records[2].role", "must be a value of rollout.v1.Role", "got 99"},
		{"negative role", func(r *rolloutv1.Record) { r.Role = -1 },
			"records[2].role", "must be a value of rollout.v1.Role", "got -1"},
		{"unknown role is found before a NaN reward", func(r *rolloutv1.Record) { r.Role = 7; r.Reward = f32(math.NaN()) },
			"records[2].role", "must be a value of rollout.v1.Role", "got 7"},
		{"NaN relationship weight", func(r *rolloutv1.Record) { r.Relationships[1].Weight = float32(math.NaN()) },
			"records[2].relationships[1].weight", "must be finite", "got NaN"},
		{"+Inf relationship weight", func(r *rolloutv1.Record) { r.Relationships[0].Weight = float32(math.Inf(1)) },
			"records[2].relationships[0].weight", "must be finite", "got +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := goodRecord()
			tt.edit(r)
			err := Record(2, r)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Record = %v, want nil", err)
				}
				return
			}
			checkFieldError(t, "Record", err, tt.field, tt.rule)
			var fe *FieldError
			if errors.As(err, &fe) && fe.Detail != tt.detail {
				t.Errorf("Record = %v, want detail %q", err, tt.detail)
			}
		})
	}
	checkFieldError(t, "Record(nil)", Record(4, nil), "records[4]", "must be set")
}

func TestFieldErrorMessage(t *testing.T) {
	r := goodRecord()
	r.Reward = f32(math.NaN())
	err := Record(3, r)
	if got, want := fmt.Sprint(err), "records[3].reward: must be finite, got NaN"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	// Wrapping keeps both the sentinel and the type reachable.
	wrapped := fmt.Errorf("append: %w", err)
	var fe *FieldError
	if !errors.Is(wrapped, ErrInvalid) || !errors.As(wrapped, &fe) || fe.Field != "records[3].reward" {
		t.Errorf("wrapped %v lost ErrInvalid or the *FieldError", wrapped)
	}
	if errors.Is(errors.New("other"), ErrInvalid) {
		t.Error("an unrelated error matches ErrInvalid")
	}
}

func TestAppendRequest(t *testing.T) {
	rec := func(id string) *rolloutv1.Record { r := goodRecord(); r.Id = id; return r }
	tests := []struct {
		name   string
		req    *rolloutv1.AppendRequest
		field  string // "" means valid
		rule   string
		detail string
	}{
		{"valid", &rolloutv1.AppendRequest{Shard: "exp/a", Records: []*rolloutv1.Record{rec("x"), rec("y")}}, "", "", ""},
		{"several empty ids", &rolloutv1.AppendRequest{Shard: "exp/a", Records: []*rolloutv1.Record{rec(""), rec(""), rec("x")}}, "", "", ""},

		{"nil request", nil, "shard", "required", ""},
		{"bad shard", &rolloutv1.AppendRequest{Shard: "../x", Records: []*rolloutv1.Record{rec("x")}},
			"shard", "segments must start with a lowercase letter or digit", `segment 1 starts with "."`},
		{"with request_id", &rolloutv1.AppendRequest{Shard: "exp/a", RequestId: "7d417461-261f-4244-9e13-d7c71483cd59", Records: []*rolloutv1.Record{rec(""), rec("x")}}, "", "", ""},
		{"bad request_id", &rolloutv1.AppendRequest{Shard: "s", RequestId: "req 1", Records: []*rolloutv1.Record{{LossMask: []byte{1}}}},
			"request_id", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'", `got " " at byte 3`},
		{"no records", &rolloutv1.AppendRequest{Shard: "s"}, "records", "must not be empty", ""},
		{"bad record", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{rec("x"), {LossMask: []byte{1}}}},
			"records[1].loss_mask", "must be empty or have one byte per output token", "got 1 bytes for 0 output_tokens"},
		{"nil record", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{rec("x"), nil}},
			"records[1]", "must be set", ""},
		{"duplicate ids", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{rec("x"), rec(""), rec("y"), rec("x")}},
			"records[3].id", "must be unique within the request", `"x" is also records[0].id`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.req)
			err := AppendRequest(tt.req)
			if tt.req != nil && !proto.Equal(before, tt.req) {
				t.Error("AppendRequest modified the request")
			}
			if tt.field == "" {
				if err != nil {
					t.Fatalf("AppendRequest = %v, want nil", err)
				}
				return
			}
			checkFieldError(t, "AppendRequest", err, tt.field, tt.rule)
			var fe *FieldError
			if errors.As(err, &fe) && fe.Detail != tt.detail {
				t.Errorf("AppendRequest = %v, want detail %q", err, tt.detail)
			}
		})
	}
}

func TestGetRequest(t *testing.T) {
	tests := []struct {
		name  string
		req   *rolloutv1.GetRequest
		field string // "" means valid
		rule  string
	}{
		{"valid", &rolloutv1.GetRequest{Shard: "exp/a", Id: "x:1"}, "", ""},
		{"nil request", nil, "shard", "required"},
		{"no shard", &rolloutv1.GetRequest{Id: "x"}, "shard", "required"},
		{"bad shard", &rolloutv1.GetRequest{Shard: "Exp", Id: "x"}, "shard",
			"must contain only a-z, 0-9, '.', '_', '-' and '/' between segments"},
		{"no id", &rolloutv1.GetRequest{Shard: "s"}, "id", "required"},
		{"bad id", &rolloutv1.GetRequest{Shard: "s", Id: "a b"}, "id", "must contain only A-Z, a-z, 0-9, '.', '_', ':' and '-'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := GetRequest(tt.req)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("GetRequest = %v, want nil", err)
				}
				return
			}
			checkFieldError(t, "GetRequest", err, tt.field, tt.rule)
		})
	}
}
