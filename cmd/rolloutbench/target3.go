package main

import (
	"context"
	"fmt"
)

// Target 3: many clients on one shard, against one client and against the
// floor's raw blob operations at the same concurrency.

// t3Results are one run of target 3.
type t3Results struct {
	single, many phaseResult
	floor        *phaseResult // nil without a store
}

func runTarget3(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	b.progress.say("target 3: %d clients on one shard vs one client, and the floor's raw blob ops/s at %d clients", sz.OneShardConc, sz.OneShardConc)
	r, err := b.target3(ctx)
	if err != nil {
		return nil, err
	}
	phases := []phaseResult{r.single, r.many}
	if r.floor != nil {
		phases = append(phases, *r.floor)
	}
	return &outcome{phases: phases, rows: t3Rows(r, sz)}, nil
}

// target3 runs both resident phases on one server: each block's background
// work is waited for, so that it counts with the block that caused it.
func (b *bench) target3(ctx context.Context) (t3Results, error) {
	sz := b.cfg.sizes
	res, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return t3Results{}, err
	}
	defer res.stop()
	set := &phaseSet{b: b}
	defer set.close()
	var ps []*phase
	sh := []string{b.base() + "/t3"}
	for _, c := range []struct {
		name    string
		clients int
	}{{"T3 resident 1 client", 1}, {fmt.Sprintf("T3 resident %d clients", sz.OneShardConc), sz.OneShardConc}} {
		s := b.spec(c.name, modeResident, res.path, c.clients, sh)
		s.NewClient, s.Figures, s.Quiesce = grpcClients(res.conn), res.figures, sz.Quiesce
		p, err := set.add(s)
		if err != nil {
			return t3Results{}, err
		}
		ps = append(ps, p)
	}
	single, many := ps[0], ps[1]
	warm(ctx, 10, single)
	var floor *phase
	if b.store != nil {
		if floor, err = b.target3Floor(ctx, set, sh); err != nil {
			return t3Results{}, err
		}
	}
	for range 2 {
		single.run(ctx, int64(sz.OneShardSingle/2), 0)
		many.run(ctx, int64(sz.OneShardConc*sz.OneShardEach/2), 0)
		if floor != nil {
			floor.run(ctx, int64(sz.OneShardConc*sz.OneShardEach/4), 0)
		}
	}
	return t3Results{single: single.result(), many: many.result(), floor: resultOf(floor)}, nil
}

// target3Floor is the floor's raw blob operations at target 3's
// concurrency, each client on its own manifest.
func (b *bench) target3Floor(ctx context.Context, set *phaseSet, sh []string) (*phase, error) {
	sz := b.cfg.sizes
	fs, err := b.floorFor(ctx, b.base()+"/floor/t3", "")
	if err != nil {
		return nil, err
	}
	c := newOpCounter()
	fs.store = c.wrap(b.store)
	s := b.spec(fmt.Sprintf("T3 floor %d clients", sz.OneShardConc), modeFloor, "raw blob ops as in T1, each client on its own manifest, shared client", sz.OneShardConc, sh)
	s.NewClient, s.Figures, s.HTTP = floorClients(fs), c.figures, b.http
	return set.add(s)
}

func t3Rows(r t3Results, sz compareSizes) []targetCheck {
	single, many := r.single, r.many
	out := []targetCheck{check("3a", fmt.Sprintf("%d clients on one shard: appends/s / single client's", sz.OneShardConc),
		many.AppendsPerSec/single.AppendsPerSec, ">=", 10, fmt.Sprintf("%.0f/s vs %.0f/s", many.AppendsPerSec, single.AppendsPerSec))}
	if many.WritesPerAppend != nil {
		out = append(out, check("3b", fmt.Sprintf("%d clients on one shard: blob writes per acked append", sz.OneShardConc),
			*many.WritesPerAppend, "<=", 0.25, fmt.Sprintf("%.0f PUTs for %d appends", many.BlobOps["put"]+many.BlobOps["put_create"]+many.BlobOps["put_cas"], many.Appends)))
	} else {
		out = append(out, skipped("3b", "blob writes per acked append", "<=", 0.25, "the target's /metrics could not be read"))
	}
	if r.floor != nil && r.floor.BlobOpsPerSec != nil {
		fops := *r.floor.BlobOpsPerSec
		out = append(out, check("3c", fmt.Sprintf("%d clients on one shard: appends/s / the floor's raw blob ops/s", sz.OneShardConc),
			many.AppendsPerSec/fops, ">", 1, fmt.Sprintf("%.0f appends/s vs %.0f blob ops/s", many.AppendsPerSec, fops)),
			check("3d", fmt.Sprintf("commit by create: %d clients on one shard: appends/s / the floor's raw blob ops/s (3c's figure)", sz.OneShardConc),
				many.AppendsPerSec/fops, ">=", 8, fmt.Sprintf("%.0f appends/s vs %.0f blob ops/s", many.AppendsPerSec, fops)))
	} else {
		out = append(out, skipped("3c", "appends/s / the floor's raw blob ops/s", ">", 1, "the floor needs --store"),
			skipped("3d", "commit by create: appends/s / the floor's raw blob ops/s", ">=", 8, "the floor needs --store"))
	}
	if many.WritesPerAppend != nil {
		out = append(out, check("3e", fmt.Sprintf("commit by create: %d clients on one shard: blob PUTs per acked append, background included", sz.OneShardConc),
			*many.WritesPerAppend, "<=", 0.15, putsDetail(many.BlobOps, many.Appends, "each block's background work waited for")))
	} else {
		out = append(out, skipped("3e", "commit by create: blob PUTs per acked append", "<=", 0.15, "the target's /metrics could not be read"))
	}
	return out
}
