package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rolloutd/rolloutd/client"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// t7Bin is one rolloutd binary target 7 measures: A (the baseline) and,
// with --rolloutd-bin-b, B (the candidate).
type t7Bin struct{ label, path string }

// t7Binaries returns the binaries to measure, building ./cmd/rolloutd once
// when --rolloutd-bin is not given.
func (b *bench) t7Binaries() ([]t7Bin, error) {
	a := b.cfg.RolloutdBin
	if a == "" {
		dir, err := os.MkdirTemp("", "rolloutbench-bin-")
		if err != nil {
			return nil, err
		}
		b.closers = append(b.closers, func() error { return os.RemoveAll(dir) })
		b.progress.say("target 7: building ./cmd/rolloutd")
		if a, err = rolloutdproc.Build(dir); err != nil {
			return nil, err
		}
	}
	bins := []t7Bin{{"A", a}}
	if b.cfg.RolloutdBinB != "" {
		bins = append(bins, t7Bin{"B", b.cfg.RolloutdBinB})
	}
	for _, bin := range bins {
		if _, err := os.Stat(bin.path); err != nil {
			return nil, fmt.Errorf("target 7: rolloutd binary %s: %w", bin.label, err)
		}
	}
	return bins, nil
}

// t7Server is one rolloutd child process and this process's gRPC client
// of it (the load is generated here: a separate load process).
type t7Server struct {
	proc   *rolloutdproc.Proc
	conn   *client.Client
	scrape *scraper
	path   string
}

// startT7Server starts bin on free loopback ports with args (the store)
// and --rolloutd-args, the environment's AZURE_ and ROLLOUTD_ variables
// replaced by env.
func (b *bench) startT7Server(bin t7Bin, env []string, args ...string) (*t7Server, error) {
	args = append(args, strings.Fields(b.cfg.RolloutdArgs)...)
	p, err := rolloutdproc.Launch(bin.path, rolloutdproc.Options{Name: "rolloutd " + bin.label, Args: args, Env: env,
		DropEnv: []string{"AZURE_", "ROLLOUTD_"}, StartTimeout: time.Minute})
	if err != nil {
		return nil, err
	}
	conn, err := newGRPCClient("passthrough:///" + p.GRPCAddr)
	if err != nil {
		_ = p.Stop(30 * time.Second)
		return nil, err
	}
	return &t7Server{proc: p, conn: conn,
		scrape: &scraper{url: "http://" + p.MetricsAddr + "/metrics", client: &http.Client{Timeout: 10 * time.Second}},
		path:   fmt.Sprintf("rolloutd %s (%s %s) as its own process, over loopback gRPC from this process (Go client package, retries off)", bin.label, bin.path, strings.Join(args, " ")),
	}, nil
}

// cpu reads the server's CPU seconds from /proc/PID/stat and from its
// process_cpu_seconds_total (-1 when that cannot be read).
func (s *t7Server) cpu() (proc, metric float64) {
	proc, err := s.proc.CPUSeconds()
	if err != nil {
		proc = -1
	}
	metric = -1
	if fams, err := s.scrape.Gather(); err == nil {
		for _, f := range fams {
			if f.GetName() == "process_cpu_seconds_total" {
				metric = sum(f)
			}
		}
	}
	return proc, metric
}

// cpuSince returns a func that gives the server's CPU since now.
func (s *t7Server) cpuSince() func() (proc, metric float64) {
	p0, m0 := s.cpu()
	return func() (float64, float64) {
		p1, m1 := s.cpu()
		d, dm := p1-p0, m1-m0
		if p0 < 0 || p1 < 0 {
			d = -1
		}
		if m0 < 0 || m1 < 0 {
			dm = -1
		}
		return d, dm
	}
}

func (s *t7Server) stop() error {
	_ = s.conn.Close()
	return s.proc.Stop(30 * time.Second)
}

// window runs p for count appends as one block: a steady window after the
// warm-up, with the server's CPU read right before and right after it.
func (s *t7Server) window(ctx context.Context, p *phase, count int64) t7Fig {
	since := s.cpuSince()
	p.run(ctx, count, 0)
	return figOf(p, since)
}

// figOf is a gRPC phase's figures, with the server's CPU over its stretch.
func figOf(p *phase, since func() (float64, float64)) t7Fig {
	srv, metric := since()
	r := p.result()
	f := t7Fig{Ops: r.Appends, ElapsedSec: r.ElapsedSec, P50ms: r.AppendLatency.P50ms,
		ServerCPU: srv, MetricCPU: metric, LoadCPU: p.cpu, Errors: r.ErrorsTotal}
	if srv >= 0 {
		p.note(fmt.Sprintf("rolloutd process CPU %.0f µs per append (/proc; %.0f µs by its process_cpu_seconds_total); CPU/append is this load process's",
			f.serverUS(), f.perOpUS(metric)))
	}
	return f
}

// floorFig is a floor child's figures: its own CPU is the "server" CPU.
func floorFig(f *floorProc) t7Fig {
	return t7Fig{Ops: f.ops, ElapsedSec: f.elapsed.Seconds(), P50ms: f.lat.summary().P50ms,
		ServerCPU: f.cpu, MetricCPU: -1, LoadCPU: -1, Errors: int64(len(f.errs))}
}
