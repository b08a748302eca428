package model

import (
	"fmt"
	"strings"
)

// replay rebuilds the steps from the initial state to the transition (parent,
// choice), with the notes each step made.
func replay(cfg Config, nodes []node, parent int32, choice uint16) []string {
	var choices []uint16
	for n := parent; n > 0; n = nodes[n].parent {
		choices = append(choices, nodes[n].choice)
	}
	for l, r := 0, len(choices)-1; l < r; l, r = l+1, r-1 {
		choices[l], choices[r] = choices[r], choices[l]
	}
	choices = append(choices, choice)

	c := &ctx{cfg: &cfg, tracing: true}
	s := initial(cfg)
	s.normalize()
	var steps []string
	for _, ch := range choices {
		acts := enabled(&s, &cfg, nil)
		c.reset()
		if int(ch) >= len(acts) || !apply(&s, acts[ch], c) {
			// The search only records choices that applied; a mismatch means
			// enabled or apply is not deterministic.
			panic("model: replay diverged")
		}
		s.normalize()
		line := strings.Join(c.notes, "; ")
		for _, v := range c.viols {
			line += "\n      !! " + v.kind.String() + ": " + v.msg
		}
		steps = append(steps, line)
	}
	return steps
}

func (ce *Counterexample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", ce.Kind, ce.Msg)
	for i, s := range ce.Steps {
		fmt.Fprintf(&b, "%3d. %s\n", i+1, s)
	}
	return b.String()
}

func (b blob) String() string {
	switch b.kind {
	case batchBlob:
		return fmt.Sprintf("batch{epoch %d, w%d put %d, id %s, seq %d}", b.epoch, b.writer, b.put, idName(b.id), b.seq)
	case fenceBlob:
		return fmt.Sprintf("fence{epoch %d, w%d, next seq %d}", b.epoch, b.writer, b.seq)
	}
	return "missing"
}

func idName(x uint8) string { return string(rune('a' + x)) }

func idSet(m uint8) string {
	var ids []string
	for x := uint8(0); x < maxIDs; x++ {
		if m&(1<<x) != 0 {
			ids = append(ids, idName(x))
		}
	}
	return "{" + strings.Join(ids, ",") + "}"
}

func recList(rs []rec) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%s@%d", idName(r.id), r.seq)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
