package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

func policyGens(bytes ...uint64) []*storagepb.Generation {
	gens := make([]*storagepb.Generation, len(bytes))
	for i, b := range bytes {
		gens[i] = &storagepb.Generation{Number: uint64(i + 1), Bytes: b}
	}
	return gens
}

func numbers(gens []*storagepb.Generation) []uint64 {
	var out []uint64
	for _, g := range gens {
		out = append(out, g.GetNumber())
	}
	return out
}

func TestCapRun(t *testing.T) {
	p := mergePolicy{maxSources: 3, maxBytes: 100}
	for _, tc := range []struct {
		name  string
		bytes []uint64
		want  []uint64
	}{
		{"within the caps", []uint64{10, 10, 10}, []uint64{1, 2, 3}},
		{"trimmed to maxSources from the newest end", []uint64{10, 10, 10, 10, 10}, []uint64{1, 2, 3}},
		{"trimmed to maxBytes", []uint64{40, 40, 40}, []uint64{1, 2}},
		{"nothing left to merge", []uint64{60, 60}, nil},
		{"one alone is no merge", []uint64{10}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := numbers(capRun(policyGens(tc.bytes...), p)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("capRun = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheapestWindow(t *testing.T) {
	p := mergePolicy{maxSources: 32, maxBytes: 1000}
	for _, tc := range []struct {
		name        string
		bytes       []uint64
		lo, k, must int
		maxBytes    int64
		want        []uint64
	}{
		{"the cheapest pair", []uint64{100, 10, 10, 100}, 2, 2, -1, 0, []uint64{2, 3}},
		{"must be in it", []uint64{100, 10, 10, 100}, 2, 2, 0, 0, []uint64{1, 2}},
		{"wider when that costs less per generation removed", []uint64{10, 10, 10, 30}, 2, 4, -1, 0, []uint64{1, 2, 3}},
		{"ties go to the wider window", []uint64{10, 10, 10}, 2, 3, -1, 0, []uint64{1, 2, 3}},
		{"at least lo wide", []uint64{100, 10, 10, 100}, 3, 3, -1, 0, []uint64{1, 2, 3}},
		{"within maxBytes", []uint64{600, 10, 600}, 2, 3, -1, 500, nil},
		{"one generation is no window", []uint64{10}, 2, 2, -1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := p
			if tc.maxBytes > 0 {
				p.maxBytes = tc.maxBytes
			}
			got := numbers(cheapestWindow(policyGens(tc.bytes...), tc.lo, tc.k, tc.must, p))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("cheapestWindow(lo %d, k %d, must %d) = %v, want %v", tc.lo, tc.k, tc.must, got, tc.want)
			}
		})
	}
}

// Under protocol v2 a merge costs a blob write and lands with a checkpoint
// (one per CheckpointEvery commits), so log batches are merged only among
// themselves, 2K at a time: never dragging an older, larger generation
// along (which rewrote the shard every K appends), never in windows so
// narrow that a lone client pays a merge per checkpoint.
func TestPickMergeV2(t *testing.T) {
	o := Options{CheckpointEvery: 4}.withDefaults().mergePolicy() // log batches merge 8 at a time
	now := time.Unix(1000, 0)
	num := uint64(0)
	gen := func(kb uint64, level uint32, age time.Duration) *storagepb.Generation {
		num++
		return &storagepb.Generation{Number: num, Bytes: kb << 10, Level: level, CreatedUnixNanos: now.Add(-age).UnixNano()}
	}
	batches := func(n int, age time.Duration) []*storagepb.Generation {
		var out []*storagepb.Generation
		for range n {
			out = append(out, gen(1, 0, age))
		}
		return out
	}
	cat := func(parts ...[]*storagepb.Generation) []*storagepb.Generation {
		var out []*storagepb.Generation
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		gens []*storagepb.Generation
		want string // the merged generations' sizes in KiB
	}{
		{"fewer batches than the window wait", cat([]*storagepb.Generation{gen(3000, 3, 0), gen(20, 1, 0)}, batches(7, 0)), "[]"},
		{"a full window of batches merges alone", cat([]*storagepb.Generation{gen(3000, 3, 0), gen(20, 1, 0)}, batches(8, 0)), "[1 1 1 1 1 1 1 1]"},
		{"above the count trigger of v1, no large generation is dragged in", cat([]*storagepb.Generation{gen(20, 1, 0), gen(10, 1, 0), gen(20, 1, 0), gen(3000, 3, 0)}, batches(7, 0), []*storagepb.Generation{gen(20, 1, 0)}, batches(7, 0)), "[]"},
		{"merged generations by size tier", cat([]*storagepb.Generation{gen(3000, 3, 0), gen(20, 1, 0), gen(20, 1, 0), gen(20, 1, 0), gen(20, 1, 0)}, batches(3, 0)), "[20 20 20 20]"},
		{"batches of a shard gone quiet", cat([]*storagepb.Generation{gen(3000, 3, 0)}, batches(3, time.Minute/2)), "[1 1 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint64
			for _, g := range pickMerge(tc.gens, now, o) {
				got = append(got, g.GetBytes()>>10)
			}
			if fmt.Sprint(got) != tc.want && !(got == nil && tc.want == "[]") {
				t.Fatalf("pickMerge = %v, want %s", got, tc.want)
			}
		})
	}
}
