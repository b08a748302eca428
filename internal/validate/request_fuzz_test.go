package validate_test

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// The request grammar, written out independently of the validator.
var (
	shardGrammar = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}(/[a-z0-9][a-z0-9._-]{0,62}){0,3}$`)
	idGrammar    = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
)

func validShard(s string) bool {
	return len(s) <= validate.MaxShardBytes && shardGrammar.MatchString(s)
}

func isFinite(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }

// firstProblem is the oracle: the field of the first rule an Append request
// breaks, in the order the contract checks them, or "" when it is valid.
func firstProblem(req *rolloutv1.AppendRequest) string {
	if !validShard(req.GetShard()) {
		return "shard"
	}
	if id := req.GetRequestId(); id != "" && !idGrammar.MatchString(id) {
		return "request_id"
	}
	if len(req.GetRecords()) == 0 {
		return "records"
	}
	seen := map[string]bool{}
	for i, r := range req.GetRecords() {
		f := func(name string) string { return fmt.Sprintf("records[%d].%s", i, name) }
		if id := r.GetId(); id != "" && !idGrammar.MatchString(id) {
			return f("id")
		}
		if _, known := rolloutv1.Role_name[int32(r.GetRole())]; !known {
			return f("role")
		}
		for _, x := range []struct {
			name string
			v    *float32
		}{{"reward", r.Reward}, {"advantage", r.Advantage}, {"score", r.Score}} {
			if x.v != nil && !isFinite(*x.v) {
				return f(x.name)
			}
		}
		for j, v := range r.GetOutputLogprobs() {
			if !isFinite(v) {
				return fmt.Sprintf("%s[%d]", f("output_logprobs"), j)
			}
		}
		for j, v := range r.GetRefLogprobs() {
			if !isFinite(v) {
				return fmt.Sprintf("%s[%d]", f("ref_logprobs"), j)
			}
		}
		if m := r.GetLossMask(); len(m) != 0 && len(m) != len(r.GetOutputTokens()) {
			return f("loss_mask")
		}
		for j, b := range r.GetLossMask() {
			if b > 1 {
				return fmt.Sprintf("%s[%d]", f("loss_mask"), j)
			}
		}
		for j, rel := range r.GetRelationships() {
			if !isFinite(rel.GetWeight()) {
				return fmt.Sprintf("%s[%d].weight", f("relationships"), j)
			}
		}
		if id := r.GetId(); id != "" {
			if seen[id] {
				return f("id")
			}
			seen[id] = true
		}
	}
	return ""
}

func seedRequests() []*rolloutv1.AppendRequest {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	reward := float32(0.5)
	return []*rolloutv1.AppendRequest{
		{Shard: "exp/run1", Records: []*rolloutv1.Record{{Id: "r-1", Content: "hi", OutputTokens: []int32{1, 2}, LossMask: []byte{1, 0}, Reward: &reward}, {Content: "no id"}}},
		{Shard: "a/../b", Records: []*rolloutv1.Record{{Id: "x"}}},
		{Shard: "s"},
		{Shard: "s", Records: []*rolloutv1.Record{{Id: "a b"}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Id: "a"}, {Id: "a"}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Reward: &nan}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Advantage: &inf}}},
		{Shard: "s", Records: []*rolloutv1.Record{{OutputLogprobs: []float32{0, nan}}}},
		{Shard: "s", Records: []*rolloutv1.Record{{OutputTokens: []int32{1}, LossMask: []byte{1, 1}}}},
		{Shard: "s", Records: []*rolloutv1.Record{{OutputTokens: []int32{1}, LossMask: []byte{2}}}},
		{Shard: "\u0430", Records: []*rolloutv1.Record{{}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Role: rolloutv1.Role_ROLE_GRADE}, {Role: 99}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Role: 7, Reward: &nan}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Relationships: []*rolloutv1.Relationship{{TargetId: "a", Weight: 0.5}, {TargetId: "b", Weight: nan}}}}},
		{Shard: "s", Records: []*rolloutv1.Record{{Relationships: []*rolloutv1.Relationship{{Weight: inf}}, LossMask: []byte{3}}}},
		{Shard: "exp/run1", RequestId: "7d417461-261f-4244-9e13-d7c71483cd59", Records: []*rolloutv1.Record{{Content: "a"}, {Id: "r-1"}, {}}},
		{Shard: "s", RequestId: "bad id", Records: []*rolloutv1.Record{{Id: "a b"}}},
		{Shard: "s", RequestId: strings.Repeat("r", 129), Records: []*rolloutv1.Record{{}}},
	}
}

// FuzzAppendRequest decodes arbitrary bytes as an AppendRequest, as the
// server's gRPC codec would, and checks the validator against the oracle:
// it accepts exactly the requests the contract allows, and it rejects the
// others with a *FieldError (matching ErrInvalid) that names the first
// field at fault. Every accepted record must also be preparable for
// storage.
func FuzzAppendRequest(f *testing.F) {
	for _, req := range seedRequests() {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &rolloutv1.AppendRequest{}
		if proto.Unmarshal(b, req) != nil {
			return // the gRPC codec would refuse it before the handler
		}
		err := validate.AppendRequest(req)
		want := firstProblem(req)
		if err == nil {
			if want != "" {
				t.Fatalf("accepted a request whose %s breaks the contract: %v", want, req)
			}
			now := time.Unix(1_700_000_000, 0)
			for i, r := range req.GetRecords() {
				var derived string
				if req.GetRequestId() != "" {
					derived = shard.DeriveID(req.GetShard(), req.GetRequestId(), i)
				}
				e, perr := shard.PrepareWithID(r, derived, now)
				if perr != nil {
					t.Fatalf("records[%d] passed validation but cannot be prepared: %v", i, perr)
				}
				switch {
				case r.GetId() != "" && e.ID != r.GetId():
					t.Fatalf("records[%d]: prepared id %q, sent %q", i, e.ID, r.GetId())
				case r.GetId() == "" && derived != "" && e.ID != derived:
					t.Fatalf("records[%d]: prepared id %q, derived %q", i, e.ID, derived)
				}
				if e.ID == "" || validate.RecordID(e.ID) != nil {
					t.Fatalf("records[%d]: prepared an invalid id %q", i, e.ID)
				}
			}
			return
		}
		var fe *validate.FieldError
		if !errors.As(err, &fe) || !errors.Is(err, validate.ErrInvalid) {
			t.Fatalf("rejection is not a *FieldError matching ErrInvalid: %T %v", err, err)
		}
		if want == "" {
			t.Fatalf("rejected a valid request: %v (%v)", err, req)
		}
		if fe.Field != want {
			t.Fatalf("rejection names %q, the first field at fault is %q: %v", fe.Field, want, err)
		}
	})
}

// FuzzGetRequest does the same for GetRequest: shard first, then a
// required id.
func FuzzGetRequest(f *testing.F) {
	for _, req := range []*rolloutv1.GetRequest{
		{Shard: "exp/run1", Id: "r-1"}, {Shard: "", Id: "a"}, {Shard: "s"}, {Shard: "s", Id: "../x"}, {Shard: "A", Id: "a"},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &rolloutv1.GetRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		want := ""
		switch {
		case !validShard(req.GetShard()):
			want = "shard"
		case !idGrammar.MatchString(req.GetId()):
			want = "id"
		}
		err := validate.GetRequest(req)
		var fe *validate.FieldError
		switch {
		case err == nil && want != "":
			t.Fatalf("accepted a request whose %s breaks the contract: %v", want, req)
		case err != nil && (!errors.As(err, &fe) || !errors.Is(err, validate.ErrInvalid)):
			t.Fatalf("rejection is not a *FieldError matching ErrInvalid: %T %v", err, err)
		case err != nil && fe.Field != want:
			t.Fatalf("rejection names %q, want %q: %v", fe.Field, want, err)
		}
	})
}
