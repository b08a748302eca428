package main

import (
	"context"
	"fmt"
	"math"
)

// Target 2: many clients over as many shards, resident, and the sockets
// the per-append design leaves behind.

func runTarget2(ctx context.Context, b *bench) (*outcome, error) {
	sz := b.cfg.sizes
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	b.progress.say("target 2: %d clients, %d appends over %d shards, resident (TIME_WAIT counted before any per-append phase)", sz.ManyClients, sz.ManyAppends, sz.ManyClients)
	res, err := b.resident(b.store, b.cfg.MaxWriters, b.target)
	if err != nil {
		return nil, err
	}
	defer res.stop()
	s := b.spec(fmt.Sprintf("T2 resident %d clients", sz.ManyClients), modeResident, res.path, sz.ManyClients, shardNames(b.base()+"/t2", sz.ManyClients))
	s.NewClient, s.Figures, s.RSS, s.Sockets, s.Settle = grpcClients(res.conn), res.figures, res.rss, true, sz.Settle
	if b.cfg.InProcess {
		s.HTTP = b.http
	}
	p, err := b.newPhase(s)
	if err != nil {
		return nil, err
	}
	p.run(ctx, sz.ManyAppends, 0)
	p.close()
	resident := p.result()
	return &outcome{
		phases: []phaseResult{resident},
		late:   func(ctx context.Context) (*outcome, error) { return b.target2PerAppend(ctx, resident) },
	}, nil
}

// target2PerAppend is target 2's row: the resident phase's TIME_WAIT,
// beside the per-append design's under the same load, measured after
// every target's resident phases.
func (b *bench) target2PerAppend(ctx context.Context, resident phaseResult) (*outcome, error) {
	sz := b.cfg.sizes
	if b.store == nil {
		return &outcome{rows: []targetCheck{check("2", fmt.Sprintf("%d clients: resident's client TIME_WAIT toward the blob endpoint", sz.ManyClients),
			tw(resident), "<=", 50, "per-append not measured (needs --store)")}}, nil
	}
	b.progress.say("target 2, per-append: %d clients, %d appends over %d shards (bounded to %v)", sz.ManyClients, sz.ManyAppends, sz.ManyClients, sz.PerAppendCap)
	if err := b.fresh(ctx); err != nil {
		return nil, err
	}
	pa, err := b.perAppendMany(ctx)
	if err != nil {
		return nil, err
	}
	detail := fmt.Sprintf("resident: %d TIME_WAIT after %d appends; per-append: %d after %d appends", int(tw(resident)), resident.Appends, int(tw(pa)), pa.Appends)
	if resident.Sockets == nil {
		detail = "no TCP blob endpoint (store: " + b.storeDesc + ")"
	}
	return &outcome{
		phases: []phaseResult{pa},
		rows: []targetCheck{check("2", fmt.Sprintf("%d clients, %d shards, %d appends: resident's client TIME_WAIT sockets toward the blob endpoint", sz.ManyClients, sz.ManyClients, sz.ManyAppends),
			tw(resident), "<=", 50, detail)},
	}, nil
}

// perAppendMany is target 2's load in the replaced design.
func (b *bench) perAppendMany(ctx context.Context) (phaseResult, error) {
	sz := b.cfg.sizes
	counter := newOpCounter()
	pa := &perAppendSpec{newStore: b.newStoreForAppend, counter: counter, log: b.log}
	s := b.spec(fmt.Sprintf("T2 per-append %d clients", sz.ManyClients), modePerAppend, "per append: "+b.perAppendPath(), sz.ManyClients, shardNames(b.base()+"/t2pa", sz.ManyClients))
	s.NewClient, s.Figures, s.HTTP, s.Sockets, s.Settle = perAppendClients(pa), counter.figures, b.http, true, sz.Settle
	p, err := b.newPhase(s)
	if err != nil {
		return phaseResult{}, err
	}
	defer p.close()
	p.run(ctx, sz.ManyAppends, sz.PerAppendCap)
	return p.result(), nil
}

// tw is a phase's peak client TIME_WAIT count toward the blob endpoint, or
// NaN without one.
func tw(r phaseResult) float64 {
	if r.Sockets == nil {
		return math.NaN()
	}
	return float64(r.Sockets.Peak.TimeWait)
}
