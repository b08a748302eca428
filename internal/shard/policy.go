package shard

import (
	"time"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The merge policy decides what the merger merges, from the manifest
// alone: these functions do no I/O and are tested on their own.
//
// Policy, checked after every commit and every MergeInterval:
//  1. Count. At MergeMaxGenerations live generations, the cheapest
//     contiguous window is merged, wide enough to come back to half that.
//     It goes first: tier runs alone can leave same-tier generations
//     interleaved with others, where no run ever forms.
//  2. Size tiers. Tier t holds generations of MergeTierBytes·MergeRun^(t-1)
//     up to MergeTierBytes·MergeRun^t bytes. MergeRun contiguous
//     generations of one tier are merged, lowest tier first, so a
//     generation is rewritten about once per tier rather than on every pass.
//  3. Age. A generation never merged and older than MergeAge is merged with
//     its cheapest neighbours.
//
// The merger claims the generations it rewrites (claims.go). Log batches
// are merged among themselves below the count trigger: see mergePolicy and
// pickBelowCount.
//
// Only contiguous runs are merged, so the per-generation sequence ranges
// never overlap. Each pass is capped by MergeMaxSources and MergeMaxBytes.
//
// Bound: merges run one at a time and commits go on meanwhile, so the count
// overshoots the trigger while a pass is in flight. Filling one shard with
// 100,000 records from 32 clients on Azurite (BenchmarkAzuriteFill100k)
// peaked at 21 live generations with the default trigger of 16 and ended at
// 17 (49 and 24 before commits folded); the documented bound is 4x
// MergeMaxGenerations under sustained load, and 2x once the load stops
// (TestMergeUnderLoadKeepsEveryRecordReadable).

// mergePolicy is what of Options the merge policy reads, with defaults
// filled in: the Merge* options, under their names in the text above.
type mergePolicy struct {
	run            int           // MergeRun
	maxGenerations int           // MergeMaxGenerations
	age            time.Duration // MergeAge
	tierBytes      int64         // MergeTierBytes
	maxBytes       int64         // MergeMaxBytes
	maxSources     int           // MergeMaxSources
	// level0: log batches (level 0) are merged this many at a time. See
	// mergePolicy.
	level0 int
	idle   time.Duration // level-0 batches this quiet are merged however few
}

// countTrigger is the number of live generations at which the count
// trigger merges, and at which a merge's edit calls for a checkpoint of
// its own instead of waiting for the next one. A lone client's log batches alone reach about three K before their
// merge lands (2K gathered, and K more while its edit waits), so the
// trigger sits above that, at 4x MergeMaxGenerations.
func (o mergePolicy) countTrigger() int {
	return max(4*o.maxGenerations, 2*o.level0)
}

// mergePolicy is the writer's merge policy, from its Options. A merge's
// edit lands with a checkpoint, which a lone client's appends call for
// once per CheckpointEvery (K) commits, and each merge costs a blob write
// (its output) besides. One merge per checkpoint of K+1 one-append batches
// would double the checkpoints' cost; a merge that takes in an older,
// larger generation each time would rewrite the shard every K appends.
// So log batches, which every commit adds, are merged only among
// themselves and 2K at a time (at most MergeMaxSources): a lone client
// then pays about 1/(2K) blob writes per append for them, and one merge
// lands every other checkpoint, leaving the others to the size tiers
// above. The outputs are merged by size tier, MergeRun at a time, so a
// record is rewritten about once per tier.
func (o Options) mergePolicy() mergePolicy {
	p := mergePolicy{
		run:            o.MergeRun,
		maxGenerations: o.MergeMaxGenerations,
		age:            o.MergeAge,
		tierBytes:      o.MergeTierBytes,
		maxBytes:       o.MergeMaxBytes,
		maxSources:     o.MergeMaxSources,
	}
	p.level0 = max(2, min(2*o.CheckpointEvery, o.MergeMaxSources))
	p.idle = o.MergeInterval
	return p
}

// pickMerge returns the contiguous generations to merge next, or nil.
func pickMerge(gens []*storagepb.Generation, now time.Time, o mergePolicy) []*storagepb.Generation {
	n := len(gens)
	if n < 2 {
		return nil
	}
	tier := func(g *storagepb.Generation) int {
		t := 0
		for lim := o.tierBytes; int64(g.GetBytes()) >= lim && t < 40; lim *= int64(o.run) {
			t++
		}
		return t
	}
	if n >= o.countTrigger() {
		// At least 2·MergeRun wide: with many generations of similar size,
		// cost per generation removed is nearly flat in the width, and a
		// narrow window would win by a hair while removing too few to keep
		// up with commits.
		k := max(o.run, n-o.maxGenerations/2)
		return cheapestWindow(gens, min(k, 2*o.run), k, -1, o)
	}
	return pickBelowCount(gens, now, o, tier)
}

// pickBelowCount is pickMerge's policy below the count trigger (see
// mergePolicy): the oldest run of contiguous log batches once it
// holds level0 of them, or once its newest is idle long (a shard that went
// quiet, whose last batches would otherwise wait for MergeAge); else the
// lowest size tier with MergeRun contiguous merged generations; else the
// age trigger.
func pickBelowCount(gens []*storagepb.Generation, now time.Time, o mergePolicy, tier func(*storagepb.Generation) int) []*storagepb.Generation {
	n := len(gens)
	for i := 0; i < n; {
		j := i
		for j < n && gens[j].GetLevel() == 0 {
			j++
		}
		if j-i >= 2 && (j-i >= o.level0 || now.Sub(time.Unix(0, gens[j-1].GetCreatedUnixNanos())) >= o.idle) {
			if run := capRun(gens[i:j], o); run != nil {
				return run
			}
		}
		i = j + 1
	}
	var best []*storagepb.Generation
	bestTier := int(^uint(0) >> 1)
	for i := 0; i < n; {
		if gens[i].GetLevel() == 0 {
			i++
			continue
		}
		t := tier(gens[i])
		j := i + 1
		for j < n && gens[j].GetLevel() > 0 && tier(gens[j]) == t {
			j++
		}
		if j-i >= o.run && t < bestTier {
			best, bestTier = gens[i:j], t
		}
		i = j
	}
	if best != nil {
		if run := capRun(best, o); run != nil {
			return run
		}
	}
	for i, g := range gens {
		if g.GetLevel() == 0 && now.Sub(time.Unix(0, g.GetCreatedUnixNanos())) >= o.age {
			return cheapestWindow(gens, 2, o.run, i, o)
		}
	}
	return nil
}

// capRun trims a run from its newest end to the pass caps.
func capRun(run []*storagepb.Generation, o mergePolicy) []*storagepb.Generation {
	var bytes int64
	for i, g := range run {
		bytes += int64(g.GetBytes())
		if i == o.maxSources || bytes > o.maxBytes {
			run = run[:i]
			break
		}
	}
	if len(run) < 2 {
		return nil
	}
	return run
}

// cheapestWindow returns the contiguous window of lo to k generations that
// removes generations at the lowest cost, bytes rewritten per generation
// removed, containing index must when must >= 0, within the caps. Measuring
// cost per generation removed makes a pass prefer many small generations
// to dragging a large one along, which keeps write amplification bounded
// while still bringing the count down.
func cheapestWindow(gens []*storagepb.Generation, lo, k, must int, o mergePolicy) []*storagepb.Generation {
	k = min(k, len(gens), o.maxSources)
	lo = max(2, min(lo, k))
	var best []*storagepb.Generation
	var bestCost float64
	for i := range gens {
		var bytes int64
		for j := i; j < len(gens) && j-i < k; j++ {
			bytes += int64(gens[j].GetBytes())
			if bytes > o.maxBytes {
				break
			}
			size := j - i + 1
			if size < lo || (must >= 0 && (must < i || must > j)) {
				continue
			}
			cost := float64(bytes) / float64(size-1)
			if best == nil || cost < bestCost || (cost == bestCost && size > len(best)) {
				best, bestCost = gens[i:j+1], cost
			}
		}
	}
	return best
}
