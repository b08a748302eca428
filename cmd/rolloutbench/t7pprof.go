package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// t7Profile runs the embedded wide load against bin started with --pprof,
// saves a CPU profile of rolloutd taken in its middle (--t7-pprof, with
// ".b" for binary B) and returns go tool pprof -top's first 10 lines.
func (b *bench) t7Profile(ctx context.Context, bin t7Bin) (_ []string, err error) {
	sz := b.cfg.sizes
	path := b.cfg.T7Pprof
	if bin.label == "B" {
		path += ".b"
	}
	dir, err := os.MkdirTemp(b.cfg.T7Dir, "rolloutbench-t7-pprof-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := b.startT7Server(bin, nil, "--store", filepath.Join(dir, "store"), "--pprof")
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := srv.stop(); err == nil {
			err = serr
		}
	}()
	set := &phaseSet{b: b}
	defer set.close()
	wide, err := set.add(b.t7Spec(fmt.Sprintf("T7 %s profile: embedded %d clients, %d shards", bin.label, sz.T7Clients, sz.T7Shards), srv, sz.T7Clients, shardNames(b.base()+"/t7-pprof-"+strings.ToLower(bin.label), sz.T7Shards)))
	if err != nil {
		return nil, err
	}
	warm(ctx, int64(4*max(sz.T7Shards, sz.T7Clients)), wide)
	secs := max(1, b.cfg.T7PprofSeconds)
	b.progress.say("target 7: profiling rolloutd %s for %d s under the embedded wide load", bin.label, secs)
	got := make(chan error, 1)
	go func() { got <- fetchProfile(ctx, srv.proc.MetricsAddr, secs, path) }()
	since := srv.cpuSince()
	wide.run(ctx, 0, time.Duration(secs)*time.Second+time.Second)
	fig := figOf(wide, since)
	if err := <-got; err != nil {
		return nil, err
	}
	if fig.Ops == 0 {
		return nil, fmt.Errorf("target 7: no append succeeded while profiling rolloutd %s: %v", bin.label, wide.firstErrs)
	}
	lines := []string{fmt.Sprintf("target 7: rolloutd %s CPU profile under the embedded wide load in %s (%.0f µs rolloutd CPU per append, %.0f appends/s, %d errors while profiled)",
		bin.label, path, fig.serverUS(), fig.rate(), fig.Errors)}
	// By own time, as asked; then by cumulative time, which names the
	// callers (a flat top is mostly syscalls and the runtime).
	for _, flags := range [][]string{{"-top"}, {"-top", "-cum"}} {
		args := append(append([]string{"tool", "pprof"}, flags...), "-nodecount=10", bin.path, path)
		top, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("go tool pprof: %w\n%s", err, top)
		}
		lines = append(lines, "  go "+strings.Join(args, " "))
		for _, l := range strings.Split(strings.TrimRight(string(top), "\n"), "\n") {
			if !strings.HasPrefix(l, "File:") && !strings.HasPrefix(l, "Build ID:") && !strings.HasPrefix(l, "Type:") {
				lines = append(lines, "    "+l)
			}
		}
	}
	return lines, nil
}

// fetchProfile saves /debug/pprof/profile?seconds=secs from addr to path.
func fetchProfile(ctx context.Context, addr string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	req.Close = true // no idle connection outlives the profile
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("profile: %s: %s", resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
