package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// blockStart is what a block reads before its first operation, so that it
// counts its own share of counters that other blocks also move.
type blockStart struct {
	figures  serverFigures
	haveFigs bool
	emu      float64 // the emulator's CPU seconds; < 0 when unknown
	http     [2]int64
}

// run runs one block: count operations, or for duration, or whichever
// ends first when both are set (0 means no bound of that kind). Errors are
// counted, not returned: a benchmark reports them.
func (p *phase) run(ctx context.Context, count int64, duration time.Duration) {
	p.blocks++
	before := p.begin()
	timeBound := p.drive(ctx, count, duration)
	if before.emu >= 0 {
		if after := emulatorCPU(); after >= before.emu {
			p.emuCPU += after - before.emu
			p.haveEmu = true
		}
	}
	p.settle(ctx)
	switch {
	case ctx.Err() != nil:
		p.stopped = "interrupted"
	case count > 0 && timeBound:
		p.stopped = fmt.Sprintf("time bound %v reached before %d operations", duration, count)
	}
	if p.haveSock {
		if s, err := countSockets(p.b.ep); err == nil {
			p.sockEnd = s
			p.sockPeak.raise(s)
		}
	}
	if p.spec.Quiesce > 0 && ctx.Err() == nil {
		pause(ctx, p.spec.Quiesce)
	}
	p.end(before)
}

// begin reads the counters the block's figures are differences of.
func (p *phase) begin() blockStart {
	spec := &p.spec
	b := blockStart{emu: -1}
	if spec.Figures != nil {
		if f, err := spec.Figures(); err == nil {
			b.figures, b.haveFigs = f, true
		} else {
			p.note("reading counters: " + err.Error())
		}
	}
	if p.b.azurite != nil {
		b.emu = emulatorCPU()
	}
	if spec.HTTP != nil {
		b.http = spec.HTTP.snapshot()
	}
	if spec.Sockets && !p.haveSock {
		if s, err := countSockets(p.b.ep); err == nil {
			p.sockBase, p.sockPeak, p.haveSock = s, s, true
		}
	}
	return b
}

// drive runs the clients until the block's bound, with the sampler beside
// them, and waits for both. It reports whether the time bound ended it.
func (p *phase) drive(ctx context.Context, count int64, duration time.Duration) (timeBound bool) {
	cpuBefore := processCPU()
	var started, finished atomic.Int64
	var timeUp atomic.Bool
	start := time.Now()
	deadline := time.Time{}
	if duration > 0 {
		deadline = start.Add(duration)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		p.sample(runCtx, start, count, duration, &finished)
	}()

	var wg sync.WaitGroup
	for i := range p.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(i)))
			for runCtx.Err() == nil {
				n := started.Add(1)
				if count > 0 && n > count {
					return
				}
				if duration > 0 && !time.Now().Before(deadline) {
					timeUp.Store(true)
					return
				}
				p.one(runCtx, i, rng)
				finished.Add(1)
			}
		})
	}
	wg.Wait()
	p.cpu += processCPU() - cpuBefore
	cancel()
	<-sampled
	p.elapsed += time.Since(start)
	return timeUp.Load()
}

// sample shows progress, samples the peak of sockets once a second and
// RSS at a quarter of the block, until ctx ends.
func (p *phase) sample(ctx context.Context, start time.Time, count int64, duration time.Duration, finished *atomic.Int64) {
	quarterDone := p.rssQ > 0 || p.spec.RSS == nil
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	lastSock := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(lastSock) >= time.Second {
			p.samplePeak()
			lastSock = time.Now()
		}
		frac := 0.0
		if duration > 0 {
			frac = float64(time.Since(start)) / float64(duration)
		}
		if count > 0 {
			frac = max(frac, float64(finished.Load())/float64(count))
		}
		if !quarterDone && frac >= 0.25 {
			p.rssQ = p.spec.RSS()
			quarterDone = true
			p.heapSnapshot("quarter")
		}
		p.b.progress.show(p.progressLine(frac, time.Since(start)))
	}
}

// settle keeps sampling sockets for the spec's Settle after the last
// operation: connections the blob service closes on its keep-alive
// timeout become TIME_WAIT only then.
func (p *phase) settle(ctx context.Context) {
	spec := &p.spec
	if p.haveSock && spec.Settle > 0 && ctx.Err() == nil {
		p.b.progress.show(fmt.Sprintf("%-30s settling %v: sockets the blob service closes late", spec.Name, spec.Settle))
		for end := time.Now().Add(spec.Settle); time.Now().Before(end) && ctx.Err() == nil; {
			time.Sleep(500 * time.Millisecond)
			p.samplePeak()
		}
	}
	p.b.progress.clear()
}

// end adds the block's RSS, counters and HTTP requests to the phase's.
func (p *phase) end(before blockStart) {
	spec := &p.spec
	if spec.RSS != nil {
		p.rssEnd = spec.RSS()
		if p.rssQ == 0 {
			p.rssQ = p.rssEnd
		}
		p.heapSnapshot("end")
	}
	if before.haveFigs {
		if after, err := spec.Figures(); err == nil {
			d := after.since(before.figures)
			for op, n := range d.BlobOps {
				p.figures.BlobOps[op] += n
			}
			p.figures.Evictions += d.Evictions
			p.figures.Opens += d.Opens
			p.figures.Fences += d.Fences
			p.figures.FencesKnown = p.figures.FencesKnown || d.FencesKnown
			p.figures.RSS = d.RSS
			p.haveFigs = true
		} else {
			p.note("reading counters: " + err.Error())
		}
	}
	if spec.HTTP != nil {
		a := spec.HTTP.snapshot()
		p.http.requests += a[0] - before.http[0]
		p.http.conns += a[1] - before.http[1]
	}
}

func (p *phase) samplePeak() {
	if !p.haveSock {
		return
	}
	if s, err := countSockets(p.b.ep); err == nil {
		p.sockPeak.raise(s)
	}
}
