package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Target 7 re-executes the binary as a floor child: in the tests, this one.
	if code, isChild := floorChildExit(); isChild {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// smokeSizes shrink --compare to a few seconds: the smoke run checks that
// every phase runs and reports, not how fast.
var smokeSizes = compareSizes{
	SingleAppends: 20, PerAppendOps: 10,
	ManyAppends: 64, ManyClients: 4, PerAppendCap: 5 * time.Second,
	OneShardSingle: 10, OneShardEach: 4, OneShardConc: 8,
	WideDuration: time.Second, WideShards: 20, WideMaxWriters: 4, WideClients: 4,
	Gets: 20, GetRecords: 20,
	LocalSingle: 20, LocalClients: 8, LocalShards: 12, LocalEach: 4,
	GetBigRecords: 400, GetSmallRecords: 20, GetFillBatch: 10, GetFillBytes: 100,
	Quiesce: 100 * time.Millisecond,
}

func noEnv(string) string { return "" }

// TestCompareSmoke runs --compare on the embedded local-disk store, shrunk,
// so that the tool cannot rot. It asserts that every target is reported
// and that nothing failed, never a timing.
func TestCompareSmoke(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.json")
	// Target 7 runs rolloutd processes of its own: TestTarget7Smoke.
	args := []string{"--inprocess", "--store", "file://" + filepath.Join(dir, "data"), "--compare", "--targets", "1,2,3,4,5,6", "--json", out}
	rep, stdout := runCompare(t, args, smokeSizes, out, 2*time.Minute)
	if !strings.Contains(stdout, "Targets (ratios measured in this run") {
		t.Error("no targets table")
	}
	var ids []string
	for _, c := range rep.Targets {
		ids = append(ids, c.ID)
	}
	if got, want := strings.Join(ids, ","), "1a,1b,1c,1d,1e,1f,1g,2,3a,3b,3c,3d,3e,4a,4b,4c,4d,5,5b,5c,6a,6b,6c"; got != want {
		t.Errorf("targets %s, want %s", got, want)
	}
	for _, c := range rep.Targets {
		switch {
		case c.ID == "2": // it counts TCP sockets: the local store has none
		case c.ID == "4d": // n/a until the server counts fences (protocol v2)
			if c.Value == nil && !strings.HasPrefix(c.Detail, "n/a") {
				t.Errorf("target 4d neither measured nor n/a: %s", c.Detail)
			}
		case c.Value == nil:
			t.Errorf("target %s not measured: %s", c.ID, c.Detail)
		}
	}
	if !strings.Contains(stdout, "commit by create") {
		t.Error("the targets table shows no commit-by-create row")
	}
	phases := map[string]bool{}
	for _, p := range rep.Phases {
		phases[p.Name] = true
		if p.Name == "T1 resident gRPC" && (p.AllWritesPerAppend == nil || p.AllDeletesPerAppend == nil) {
			t.Error("T1 resident gRPC: no PUTs and DELETEs per append over the whole stretch")
		}
		if p.ErrorsTotal != 0 {
			t.Errorf("phase %s: %d errors: %v %v", p.Name, p.ErrorsTotal, p.Errors, p.FirstErrors)
		}
		if p.Appends == 0 && p.Gets == 0 {
			t.Errorf("phase %s did nothing", p.Name)
		}
		if p.BlobOps == nil && p.Mode != modeFloorFS && p.Mode != modeFloor1FS {
			t.Errorf("phase %s: no blob operation counts", p.Name)
		}
		if p.CPUusPerAppend == nil && p.Appends > 0 {
			t.Errorf("phase %s: no CPU per append", p.Name)
		}
	}
	for _, want := range []string{"T1 floor", "T1 floor1", "T1 resident in-process", "T1 resident gRPC", "T2 resident 4 clients",
		"T3 floor 8 clients", "T4 resident 20 shards", "T5 read floor", "T5 Get, other instance",
		"T5 fill 400 records", "T5 Get at 400 records", "T5 Get at 20 records",
		"T1 per-append, new shard each", "T2 per-append 4 clients",
		"T6 local floor", "T6 local floor1", "T6 resident gRPC 1 client", "T6 resident 8 clients, 1 shard", "T6 resident 8 clients, 12 shards"} {
		if !phases[want] {
			t.Errorf("no phase %q", want)
		}
	}
}

// runCompare runs --compare with args (which write --json to out) and
// sizes, and returns the report and what it printed.
func runCompare(t *testing.T, args []string, sizes compareSizes, out string, timeout time.Duration) (report, string) {
	t.Helper()
	cfg, err := parseConfig(args, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.sizes = sizes
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout bytes.Buffer
	if err := runConfig(ctx, cfg, args, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	t.Log(stdout.String())
	return readReport(t, out), stdout.String()
}

// readReport reads a --json report.
func readReport(t *testing.T, path string) report {
	t.Helper()
	var rep report
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v", err)
	}
	return rep
}

// TestModesSmoke runs every mode once with a read/write mix, on the
// in-memory store.
func TestModesSmoke(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "modes.json")
	var stdout bytes.Buffer
	args := []string{"--inprocess", "--store", "mem://", "--mode", "per-append,floor,floor1,resident,resident-shard",
		"--concurrency", "4", "--shards", "4", "--records", "3", "--record-bytes", "100",
		"--count", "60", "--read-fraction", "0.3", "--json", out, "--progress", "off"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, args, noEnv, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	var rep report
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, p := range rep.Phases {
		order = append(order, p.Mode)
		if p.ErrorsTotal != 0 {
			t.Errorf("mode %s: errors %v %v", p.Mode, p.Errors, p.FirstErrors)
		}
		if p.Appends+p.Gets != 60 {
			t.Errorf("mode %s: %d appends + %d gets, want 60 operations", p.Mode, p.Appends, p.Gets)
		}
	}
	// Per-append last: its TIME_WAIT sockets outlive it.
	if got := strings.Join(order, ","); got != "floor,floor1,resident-shard,resident,per-append" {
		t.Errorf("modes ran in order %s", got)
	}
	if len(rep.Ratios) != 4 {
		t.Errorf("ratios to the floor: %+v", rep.Ratios)
	}
	for _, p := range rep.Phases {
		if p.Mode == modeResident && p.Gets == 0 {
			t.Error("resident did no Gets with --read-fraction 0.3")
		}
	}
}

func TestParseConfig(t *testing.T) {
	env := func(conn string) func(string) string {
		return func(k string) string {
			if k == envConnectionString {
				return conn
			}
			return ""
		}
	}
	for _, c := range []struct {
		name string
		args []string
		env  func(string) string
		err  string // substring; "" means valid
	}{
		{"in-process default store", []string{"--inprocess"}, noEnv, ""},
		{"needs a target", []string{}, noEnv, "--target"},
		{"both targets", []string{"--inprocess", "--target", "h:1"}, noEnv, "exclude"},
		{"azblob needs credentials", []string{"--inprocess", "--store", "azblob://bench"}, noEnv, envConnectionString},
		{"azblob with credentials", []string{"--inprocess", "--store", "azblob://bench/p"}, env("x"), ""},
		{"azurite picks azblob", []string{"--inprocess", "--azurite", "https", "--compare"}, noEnv, ""},
		{"azurite serves azblob only", []string{"--inprocess", "--azurite", "http", "--store", "mem://"}, noEnv, "--azurite"},
		{"bad container", []string{"--inprocess", "--store", "azblob://B"}, env("x"), "--store"},
		{"bad mode", []string{"--inprocess", "--mode", "fast"}, noEnv, "--mode"},
		{"resident-shard is in-process", []string{"--target", "h:1", "--mode", "resident-shard"}, noEnv, "--inprocess"},
		{"floor-fs needs the local store", []string{"--inprocess", "--store", "mem://", "--mode", "floor-fs"}, noEnv, "floor-fs"},
		{"floor-fs on the local store", []string{"--inprocess", "--store", "/tmp/x", "--mode", "floor-fs,resident"}, noEnv, ""},
		{"floor1-fs needs the local store", []string{"--inprocess", "--store", "mem://", "--mode", "floor1-fs"}, noEnv, "floor1-fs"},
		{"floor1-fs on the local store", []string{"--inprocess", "--store", "/tmp/x", "--mode", "floor1-fs,floor1"}, noEnv, ""},
		{"remote floor1 needs a store", []string{"--target", "h:1", "--mode", "floor1"}, noEnv, "--store"},
		{"remote floor needs a store", []string{"--target", "h:1", "--mode", "floor"}, noEnv, "--store"},
		{"remote local store", []string{"--target", "h:1", "--store", "/tmp/x"}, noEnv, "azblob"},
		{"read fraction", []string{"--inprocess", "--read-fraction", "1.5"}, noEnv, "--read-fraction"},
		{"targets", []string{"--inprocess", "--compare", "--targets", "1,9"}, noEnv, "--targets"},
		{"remote resident", []string{"--target", "localhost:50051"}, noEnv, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseConfig(c.args, c.env, &bytes.Buffer{})
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one mentioning %q", err, c.err)
			}
		})
	}
	if _, err := parseConfig([]string{"--help"}, noEnv, &bytes.Buffer{}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	cfg, err := parseConfig([]string{"--target", "10.0.0.7:50051"}, noEnv, &bytes.Buffer{})
	if err != nil || cfg.MetricsURL != "http://10.0.0.7:9090/metrics" {
		t.Errorf("metrics URL %q, %v", cfg.MetricsURL, err)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.9, 900 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {1, time.Second}} {
		got := h.quantile(c.q)
		if d := got - c.want; d < -c.want/100 || d > c.want/100 {
			t.Errorf("q%v = %v, want %v within 1%%", c.q, got, c.want)
		}
	}
	if h.summary().MaxMs != 1000 {
		t.Errorf("max %v", h.summary().MaxMs)
	}
	for _, v := range []uint64{0, 1, 127, 128, 129, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		lo := bucketValue(bucketOf(v))
		if d := float64(lo) - float64(v); d > float64(v)/100+1 || -d > float64(v)/100+1 {
			t.Errorf("value %d lands in bucket %d valued %d", v, bucketOf(v), lo)
		}
	}
}

func TestBlobEndpoint(t *testing.T) {
	for conn, want := range map[string]string{
		"DefaultEndpointsProtocol=http;AccountName=a;AccountKey=k;BlobEndpoint=http://127.0.0.1:10000/a;": "127.0.0.1:10000",
		"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=k;EndpointSuffix=core.windows.net":    "acct.blob.core.windows.net:443",
		"BlobEndpoint=http://localhost/devstoreaccount1":                                                  "localhost:80",
	} {
		host, port, ok := parseBlobEndpoint(conn)
		if got := net.JoinHostPort(host, strconv.Itoa(port)); !ok || got != want {
			t.Errorf("%s: %s (%v), want %s", conn, got, ok, want)
		}
	}
}

// TestFencesCounter checks that target 4's fence row reads the server's
// rolloutd_log_fences_total, and says n/a for a server without it.
func TestFencesCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	before, err := figuresOf(reg)
	if err != nil {
		t.Fatal(err)
	}
	if before.FencesKnown {
		t.Fatal("fences known on a registry without the counter")
	}
	r := phaseResult{}
	if c := fencesCheck(r, 1000); c.Value != nil || !strings.HasPrefix(c.Detail, "n/a") {
		t.Errorf("without the counter: %+v, want n/a", c)
	}

	fences := prometheus.NewCounter(prometheus.CounterOpts{Name: "rolloutd_log_fences_total", Help: "fences"})
	reg.MustRegister(fences)
	fences.Add(2)
	before, err = figuresOf(reg)
	if err != nil {
		t.Fatal(err)
	}
	fences.Add(3)
	after, err := figuresOf(reg)
	if err != nil {
		t.Fatal(err)
	}
	d := after.since(before)
	if !d.FencesKnown || d.Fences != 3 {
		t.Fatalf("fences %v (known %v), want 3", d.Fences, d.FencesKnown)
	}
	r.LogFences = ptr(d.Fences)
	if c := fencesCheck(r, 1000); c.Value == nil || *c.Value != 3 {
		t.Errorf("with the counter: %+v, want 3", c)
	}
}
