package main

import (
	"context"
	"fmt"
)

// Target 6: the embedded local store, across shards and alone.

// t6Results are one run of target6.
type t6Results struct {
	floor, floor1 phaseResult // the local two-write and one-write floors
	single        phaseResult // one client over gRPC
	one, wide     phaseResult // LocalClients clients on one shard, and over LocalShards shards
}

func runTarget6(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if b.cfg.store.Kind != "local" || !b.cfg.InProcess {
		const why = "needs --inprocess on the embedded local store"
		return &outcome{rows: []targetCheck{
			skipped("6a", "local store: 64 clients over 100 shards: appends/s / 64 clients on one shard's", ">=", 0.5, why),
			skipped("6b", "local store, single client: resident p50 over gRPC / local floor p50", "<=", 1.4, why),
			skipped("6c", "local store, single client: resident p50 over gRPC / local one-write floor p50", "<=", 1.4, why),
		}}, nil
	}
	b.progress.say("target 6: the local store: %d clients on 1 shard vs over %d shards; a single client vs the local floor (file writes, fsyncs, renames in a loop)", sz.LocalClients, sz.LocalShards)
	r, err := b.target6(ctx)
	if err != nil {
		return nil, err
	}
	return &outcome{phases: []phaseResult{r.floor, r.floor1, r.single, r.one, r.wide}, rows: t6Rows(r, sz)}, nil
}

// target6 measures the embedded local store, in-process over gRPC: a
// single client against the local floor (the same file writes, fsyncs and
// renames in a plain loop, beside the store), interleaved; then
// LocalClients clients on one shard against the same clients over
// LocalShards shards, interleaved, with this process's CPU per append in
// both.
func (b *bench) target6(ctx context.Context) (t6Results, error) {
	sz := b.cfg.sizes
	base := b.base() + "/t6"
	res, err := b.resident(b.store, b.cfg.MaxWriters, nil)
	if err != nil {
		return t6Results{}, err
	}
	defer res.stop()
	set := &phaseSet{b: b}
	defer set.close()
	newPhase := set.add

	s := b.spec("T6 resident gRPC 1 client", modeResident, res.path, 1, []string{base + "-single"})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	single, err := newPhase(s)
	if err != nil {
		return t6Results{}, err
	}
	warm(ctx, 20, single)
	floor, floor1, err := b.target6Floors(ctx, base+"-single", newPhase)
	if err != nil {
		return t6Results{}, err
	}
	warm(ctx, 20, floor, floor1)
	interleave(ctx, int64(sz.LocalSingle), sz.LocalSingle/10, floor, floor1, single)

	s = b.spec(fmt.Sprintf("T6 resident %d clients, 1 shard", sz.LocalClients), modeResident, res.path, sz.LocalClients, []string{base + "-one"})
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	one, err := newPhase(s)
	if err != nil {
		return t6Results{}, err
	}
	s = b.spec(fmt.Sprintf("T6 resident %d clients, %d shards", sz.LocalClients, sz.LocalShards), modeResident, res.path, sz.LocalClients, shardNames(base+"-wide", sz.LocalShards))
	s.NewClient, s.Figures = grpcClients(res.conn), res.figures
	wide, err := newPhase(s)
	if err != nil {
		return t6Results{}, err
	}
	// Every writer open before measuring.
	warm(ctx, int64(4*max(sz.LocalShards, sz.LocalClients)), one, wide)
	interleave(ctx, int64(sz.LocalClients*sz.LocalEach), 4, one, wide)
	return t6Results{floor: floor.result(), floor1: floor1.result(), single: single.result(), one: one.result(), wide: wide.result()}, nil
}

// target6Floors builds the local floors of a single client on shard sh,
// whose manifest, as the warm-up left it, the two-write floor writes.
func (b *bench) target6Floors(ctx context.Context, sh string, newPhase func(loadSpec) (*phase, error)) (floor, floor1 *phase, err error) {
	fs, err := b.floorFor(ctx, "", sh)
	if err != nil {
		return nil, nil, err
	}
	dir, err := b.fsFloorDir("t6")
	if err != nil {
		return nil, nil, err
	}
	s := b.spec("T6 local floor", modeFloorFS, "plain file operations in a loop, beside the store: write+fsync+rename of the generation, fsync of its directory, the same for the manifest", 1, []string{sh})
	s.NewClient = fsFloorClients(dir, fs.generation, fs.manifest)
	if floor, err = newPhase(s); err != nil {
		return nil, nil, err
	}
	s = b.spec("T6 local floor1", modeFloor1FS, "plain file operations in a loop, beside the store: write+fsync+rename of the generation, fsync of its directory (one write: commit by create)", 1, []string{sh})
	dir1, err := b.fsFloorDir("t6-1")
	if err != nil {
		return nil, nil, err
	}
	s.NewClient = fsFloor1Clients(dir1, fs.generation)
	if floor1, err = newPhase(s); err != nil {
		return nil, nil, err
	}
	return floor, floor1, nil
}

func t6Rows(r t6Results, sz compareSizes) []targetCheck {
	cpu := func(r phaseResult) string {
		if r.CPUusPerAppend == nil {
			return "?"
		}
		return fmt.Sprintf("%.0f µs", *r.CPUusPerAppend)
	}
	return []targetCheck{
		check("6a", fmt.Sprintf("local store: %d clients over %d shards: appends/s / %d clients on one shard's", sz.LocalClients, sz.LocalShards, sz.LocalClients),
			r.wide.AppendsPerSec/r.one.AppendsPerSec, ">=", 0.5,
			fmt.Sprintf("%.0f/s vs %.0f/s; CPU per append %s vs %s", r.wide.AppendsPerSec, r.one.AppendsPerSec, cpu(r.wide), cpu(r.one))),
		check("6b", "local store, single client: resident p50 over gRPC / local floor p50", p50(r.single)/p50(r.floor), "<=", 1.4,
			fmt.Sprintf("%s vs %s", ms(p50(r.single)), ms(p50(r.floor)))),
		check("6c", "commit by create: local store, single client: resident p50 over gRPC / local one-write floor p50", p50(r.single)/p50(r.floor1), "<=", 1.4,
			fmt.Sprintf("%s vs %s", ms(p50(r.single)), ms(p50(r.floor1)))),
	}
}
