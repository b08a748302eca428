// Package synth generates rollout records that look like real ones to a
// compressor, for export's tests and measurements: English-like sentences
// for content, small token ids, and logprobs rounded to bfloat16, the
// precision a model emits them at. Everything comes from a seeded
// generator, so a figure measured on it can be reproduced.
package synth

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

var words = strings.Fields(`the a model policy reward answer question step first then
therefore because value function gradient we compute sum of two numbers is equal to
check result correct wrong tool call output returns list items each one this that
which has had will would can could should must proof case let assume suppose
following since hence so thus final solution problem given find show prove number
integer prime even odd square root divide multiply add subtract total count`)

// Gen makes records. It is not safe for concurrent use.
type Gen struct {
	rng *rand.Rand
	// ContentBytes is the approximate size of each record's content.
	ContentBytes int
	n            int
}

// New returns a generator seeded with seed, making records with about
// contentBytes of content.
func New(seed uint64, contentBytes int) *Gen {
	return &Gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ContentBytes: contentBytes}
}

// bf16 rounds f to bfloat16 precision (8 significant bits).
func bf16(f float32) float32 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

func (g *Gen) sentence(b *strings.Builder) {
	n := 6 + g.rng.IntN(12)
	for i := range n {
		w := words[g.rng.IntN(len(words))]
		if i == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		} else {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	b.WriteString(". ")
}

func (g *Gen) tokens(n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(g.rng.IntN(32000))
	}
	return t
}

func (g *Gen) logprobs(n int) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = bf16(float32(-g.rng.ExpFloat64() * 0.7))
	}
	return l
}

// Record returns the next record; its id is unique per generator.
func (g *Gen) Record() *rolloutv1.Record {
	g.n++
	var b strings.Builder
	for b.Len() < g.ContentBytes {
		g.sentence(&b)
	}
	content := b.String()
	out := max(1, len(content)/4)
	mask := make([]byte, out)
	for i := range mask {
		if g.rng.IntN(10) > 0 {
			mask[i] = 1
		}
	}
	rollout := g.n / 8
	r := &rolloutv1.Record{
		Id:                fmt.Sprintf("r%08d", g.n),
		RolloutId:         fmt.Sprintf("rollout-%06d", rollout),
		ProblemId:         fmt.Sprintf("problem-%04d", g.rng.IntN(2000)),
		Dataset:           "gsm8k",
		SequenceOrder:     int32(g.n % 8),
		Role:              rolloutv1.Role(1 + g.n%6),
		CreatedAt:         timestamppb.New(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(g.n) * 1234567 * time.Microsecond)),
		Content:           content,
		ContentType:       "text/plain",
		InputTokens:       g.tokens(out),
		OutputTokens:      g.tokens(out),
		OutputLogprobs:    g.logprobs(out),
		RefLogprobs:       g.logprobs(out),
		LossMask:          mask,
		PolicyVersion:     fmt.Sprintf("ckpt-%d", g.rng.IntN(5)),
		IncludeInTraining: g.rng.IntN(4) > 0,
		Metadata:          map[string]string{"env": "math", "temperature": "0.7"},
	}
	if g.n%4 == 0 {
		reward := bf16(float32(g.rng.Float64()*2 - 1))
		r.Reward = &reward
		r.GraderId = "grader-v2"
		r.Relationships = []*rolloutv1.Relationship{{TargetId: fmt.Sprintf("r%08d", g.n-1), Relation: "grades", Weight: 1}}
	}
	if g.n%3 == 0 {
		adv := bf16(float32(g.rng.NormFloat64()))
		r.Advantage = &adv
	}
	return r
}
