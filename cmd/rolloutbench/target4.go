package main

import (
	"context"
	"fmt"
	"math"
)

// Target 4: many shards through fewer resident writers than shards, so
// that the writers' LRU evicts.

// t4Results are one run of target 4.
type t4Results struct {
	wide phaseResult
	// figures: the server's counters could be read, so evictions are
	// known even when there were none.
	figures bool
}

func runTarget4(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	b.progress.say("target 4: %d shards, max-writers %d, %d clients, %v", sz.WideShards, sz.WideMaxWriters, sz.WideClients, sz.WideDuration)
	r, err := b.target4(ctx)
	if err != nil {
		return nil, err
	}
	return &outcome{phases: []phaseResult{r.wide}, rows: t4Rows(r, sz, b.cfg.Target != "")}, nil
}

func (b *bench) target4(ctx context.Context) (t4Results, error) {
	sz := b.cfg.sizes
	res, err := b.resident(b.store, sz.WideMaxWriters, b.target)
	if err != nil {
		return t4Results{}, err
	}
	defer res.stop()
	s := b.spec(fmt.Sprintf("T4 resident %d shards", sz.WideShards), modeResident, res.path, sz.WideClients, shardNames(b.base()+"/t4", sz.WideShards))
	s.NewClient, s.Figures, s.RSS, s.Sockets = grpcClients(res.conn), res.figures, res.rss, true
	if b.cfg.InProcess {
		s.HTTP = b.http
	}
	p, err := b.newPhase(s)
	if err != nil {
		return t4Results{}, err
	}
	p.run(ctx, 0, sz.WideDuration)
	p.close()
	return t4Results{wide: p.result(), figures: res.figures != nil}, nil
}

func t4Rows(r t4Results, sz compareSizes, remote bool) []targetCheck {
	w := r.wide
	errs := check("4a", fmt.Sprintf("%d shards, max-writers %d: errors", sz.WideShards, sz.WideMaxWriters), float64(w.ErrorsTotal), "==", 0, errCol(w))
	if remote {
		errs.Detail += "; the remote target must run with --max-writers=128"
	}
	out := []targetCheck{errs}
	if w.Evictions > 0 || r.figures {
		out = append(out, check("4b", fmt.Sprintf("%d shards: writer evictions reported", sz.WideShards), w.Evictions, ">", 0, fmt.Sprintf("%.0f evictions, %.0f writer opens", w.Evictions, w.WriterOpens)))
	} else {
		out = append(out, skipped("4b", "writer evictions reported", ">", 0, "the target's /metrics could not be read"))
	}
	out = append(out, fencesCheck(w, sz.WideShards))
	if w.RSSQuarterBytes > 0 {
		out = append(out, check("4c", fmt.Sprintf("%d shards: RSS at end / RSS at a quarter of the run", sz.WideShards), w.RSSBytes/w.RSSQuarterBytes, "<=", 1.25,
			fmt.Sprintf("%s vs %s (%s)", mib(w.RSSBytes), mib(w.RSSQuarterBytes), w.RSSSource)))
	} else {
		out = append(out, skipped("4c", "RSS at end / RSS at a quarter", "<=", 1.25, "RSS unknown"))
	}
	return out
}

// fencesCheck reports the fences target 4 wrote to commit logs, from the
// server's rolloutd_log_fences_total; n/a where the server has no such
// counter (a protocol-v1 build).
func fencesCheck(r phaseResult, shards int) targetCheck {
	what := fmt.Sprintf("commit by create: %d shards: fences written to commit logs", shards)
	if r.LogFences == nil {
		return reported("4d", what, math.NaN(), "n/a: the server exports no rolloutd_log_fences_total (protocol v1 writes no fences)")
	}
	return reported("4d", what, *r.LogFences, fmt.Sprintf("%.0f fences, %.0f writer opens, %.0f evictions", *r.LogFences, r.WriterOpens, r.Evictions))
}
