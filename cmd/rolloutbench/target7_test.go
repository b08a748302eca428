package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// t7SmokeSizes shrink target 7 to seconds: the smoke run checks that every
// load runs and reports, not how fast.
var t7SmokeSizes = compareSizes{T7Clients: 4, T7Shards: 6, T7Each: 5, T7AzEach: 5, T7Single: 20, T7Rounds: 1, T7Idle: 100 * time.Millisecond}

// TestTarget7Smoke runs target 7, shrunk, on the embedded store and on
// Azurite, with the profile: every row is measured, every load and floor
// child ran without an error, the per-load table is printed, and the
// profile's top lines. It asserts no timing. (Two binaries: TestT7RowsJudgeB.)
func TestTarget7Smoke(t *testing.T) {
	dir := t.TempDir()
	bin, err := rolloutdproc.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, prof := filepath.Join(dir, "bench.json"), filepath.Join(dir, "rolloutd.pprof")
	args := []string{"--inprocess", "--store", "file://" + filepath.Join(dir, "data"), "--compare", "--targets", "7", "--json", out,
		"--rolloutd-bin", bin, "--t7-dir", dir, "--t7-pprof", prof, "--t7-pprof-seconds", "1", "--progress", "off"}
	rep, _ := runCompare(t, args, t7SmokeSizes, out, 3*time.Minute)
	var ids []string
	for _, c := range rep.Targets {
		ids = append(ids, c.ID)
		if c.Value == nil {
			t.Errorf("target %s not measured: %s", c.ID, c.Detail)
		}
	}
	if got, want := strings.Join(ids, ","), "7a,7b,7c,7d,7e,7f,7g"; got != want {
		t.Errorf("targets %s, want %s", got, want)
	}
	checkT7Phases(t, rep.Phases)
	diag := strings.Join(rep.Diagnostics, "\n")
	for _, want := range []string{`embedded 4 clients, 6 shards +A `, `Azurite floor1 PUT \(own process\) +A `, `go tool pprof -top -nodecount`, `go tool pprof -top -cum`, `flat%`} {
		if !regexp.MustCompile(want).MatchString(diag) {
			t.Errorf("diagnostics lack %q:\n%s", want, diag)
		}
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("profile %s: %v", prof, err)
	}
}

// checkT7Phases: every load ran, did something, and
// failed nothing.
func checkT7Phases(t *testing.T, phases []phaseResult) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range phases {
		seen[p.Name] = true
		if p.ErrorsTotal != 0 || p.Appends == 0 {
			t.Errorf("phase %s: %d appends, %d errors: %v", p.Name, p.Appends, p.ErrorsTotal, p.FirstErrors)
		}
		if p.CPUusPerAppend == nil {
			t.Errorf("phase %s: no CPU per append", p.Name)
		}
	}
	for _, load := range []string{"embedded 4 clients, 6 shards", "embedded 4 clients, 1 shard", "embedded 1 client", "local floor1 (own process)",
		"Azurite 1 client", "Azurite 1 client, in-process writer", "Azurite 4 clients, 1 shard", "Azurite floor1 (own process)"} {
		if name := "T7 A r1 " + load; !seen[name] {
			t.Errorf("no phase %q", name)
		}
	}
}

// TestT7RowsJudgeB: with two binaries, every row is B's median (A's median
// and B/A in its detail), and the per-load table gives A, B and B/A.
func TestT7RowsJudgeB(t *testing.T) {
	round := func(cpuUS float64) t7Round {
		f := t7Fig{Ops: 1000, ElapsedSec: 1, P50ms: 2, ServerCPU: cpuUS * 1000 / 1e6, MetricCPU: -1, LoadCPU: 0.1}
		return t7Round{Wide: f, One: f, Single: f, LocalFloor: f, AzSingle: f, AzInProcess: f, AzFloor: f, AzOne: f, Az: true}
	}
	a := []t7Round{round(800), round(900), round(700)}
	b := []t7Round{round(200), round(100), round(300)}
	rows := t7Rows(t7SmokeSizes, true, a, b)
	if len(rows) != 7 || rows[0].ID != "7a" || rows[0].Value == nil || *rows[0].Value != 200 {
		t.Fatalf("rows %+v: want 7a..7g, 7a the median of B's rounds (200)", rows)
	}
	if d := rows[0].Detail; !strings.Contains(d, "A (--rolloutd-bin) median 800") || !strings.Contains(d, "B/A 0.25") {
		t.Errorf("7a detail %q: want A's median 800 and B/A 0.25", d)
	}
	if rows[0].Met == nil || !*rows[0].Met {
		t.Errorf("7a = 200 µs: want met (<= 250)")
	}
	table := strings.Join(t7Table(t7SmokeSizes, true, []t7Bin{{"A", "a"}, {"B", "b"}}, map[string][]t7Round{"A": a, "B": b}), "\n")
	if !regexp.MustCompile(`embedded 4 clients, 6 shards +B/A +0\.25 `).MatchString(table) {
		t.Errorf("per-load table lacks B/A 0.25 for the wide load:\n%s", table)
	}
	if only := t7Rows(t7SmokeSizes, false, a, nil); only[0].Value == nil || *only[0].Value != 800 || only[4].Value != nil {
		t.Errorf("A alone, no Azurite: 7a %v (want 800), 7e %v (want not measured)", only[0].Value, only[4].Value)
	}
}

// Target 7 builds and starts processes of its own: a plain --compare, or
// one against a --target, must not run it (nor judge a remote target by
// a local build).
func TestT7RunsOnlyWhenNamedAndLocal(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		runs bool
	}{
		{"default --compare", config{}, false},
		{"other targets", config{Targets: []string{"1", "6"}}, false},
		{"named", config{Targets: []string{"7"}}, true},
		{"named with a remote target", config{Targets: []string{"7"}, Target: "h:1"}, false},
	}
	for _, c := range cases {
		if why := t7Refused(&c.cfg); (why == "") != c.runs {
			t.Errorf("%s: refused %q, want runs=%v", c.name, why, c.runs)
		}
	}
}
