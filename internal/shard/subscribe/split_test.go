package subscribe

import (
	"fmt"
	"testing"
)

// Members 0..n-1 take disjoint shares that cover every shard, near even.
func TestSplitDisjointAndCovering(t *testing.T) {
	const shards = 3000
	for _, n := range []uint32{2, 3, 7} {
		counts := make([]int, n)
		for i := range shards {
			s := fmt.Sprintf("exp-42/actor-%d", i)
			takers := 0
			for m := range n {
				if Takes(s, m, n) {
					takers++
					counts[m]++
				}
			}
			if takers != 1 {
				t.Fatalf("n=%d: shard %s is taken by %d members", n, s, takers)
			}
		}
		for m, c := range counts {
			if want := shards / int(n); c < want*8/10 || c > want*12/10 {
				t.Errorf("n=%d: member %d takes %d of %d shards, want about %d", n, m, c, shards, want)
			}
		}
	}
	for _, n := range []uint32{0, 1} {
		if !Takes("a", 0, n) {
			t.Errorf("with %d members member 0 must take every shard", n)
		}
	}
}

// Going from n to n+1 members moves about 1/(n+1) of the shards, each to
// the new member: the others keep what they had.
func TestSplitStableAcrossMemberCounts(t *testing.T) {
	const shards = 5000
	for n := uint32(1); n <= 8; n++ {
		moved := 0
		for i := range shards {
			s := fmt.Sprintf("team/run-%d", i)
			before, after := Member(s, n), Member(s, n+1)
			if before != after {
				moved++
				if after != n {
					t.Fatalf("n=%d→%d: shard %s moved from %d to %d, not to the new member", n, n+1, s, before, after)
				}
			}
		}
		want := float64(shards) / float64(n+1)
		if f := float64(moved); f < want*0.85 || f > want*1.15 {
			t.Errorf("n=%d→%d moved %d of %d shards, want about %.0f", n, n+1, moved, shards, want)
		}
	}
}

// The function is the documented one: these values were computed with
// Python's xxhash package from the formula in Member's comment.
func TestMemberGolden(t *testing.T) {
	for _, c := range []struct {
		shard   string
		members uint32
		want    uint32
	}{
		{"exp-42/actor-0", 3, 2},
		{"exp-42/actor-3", 3, 1},
		{"a", 5, 0},
	} {
		if got := Member(c.shard, c.members); got != c.want {
			t.Errorf("Member(%q, %d) = %d, want %d", c.shard, c.members, got, c.want)
		}
	}
}
