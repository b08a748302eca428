package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// TestResidentAgainstARunningServer runs --mode resident against a real
// rolloutd process on the on-disk embedded store, as the Python client's
// benchmark compares against it: one client, 1 KiB records, appends and
// Gets, the server's blob operations scraped from its /metrics, and no
// error.
func TestResidentAgainstARunningServer(t *testing.T) {
	dir := t.TempDir()
	bin, err := rolloutdproc.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := rolloutdproc.Start(t, bin, rolloutdproc.Options{
		Args: []string{"--store", filepath.Join(dir, "data")}, DropEnv: []string{"AZURE_", "ROLLOUTD_"}, StartTimeout: 30 * time.Second,
	})
	out := filepath.Join(dir, "resident.json")
	args := []string{"--target", srv.GRPCAddr, "--metrics-url", "http://" + srv.MetricsAddr + "/metrics",
		"--mode", "resident", "--count", "60", "--read-fraction", "0.25", "--json", out, "--progress", "off"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	if err := run(ctx, args, noEnv, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	t.Log(stdout.String())
	rep := readReport(t, out)
	if len(rep.Phases) != 1 {
		t.Fatalf("phases: %+v", rep.Phases)
	}
	p := rep.Phases[0]
	if p.Mode != modeResident || p.ErrorsTotal != 0 || p.Appends+p.Gets != 60 || p.Gets == 0 || p.AppendLatency.P50ms <= 0 {
		t.Errorf("resident against %s: mode %s, %d appends, %d gets, p50 %v, errors %v %v", srv.GRPCAddr, p.Mode, p.Appends, p.Gets, p.AppendLatency.P50ms, p.Errors, p.FirstErrors)
	}
	if p.WritesPerAppend == nil || *p.WritesPerAppend <= 0 {
		t.Errorf("no server-side blob figures from %s's /metrics: %+v", srv.MetricsAddr, p)
	}
}
