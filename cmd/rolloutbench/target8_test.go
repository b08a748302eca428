package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// t8SmokeSizes shrink target 8 to seconds: the smoke run checks that every
// part runs and reports, not how fast or how cheap.
var t8SmokeSizes = compareSizes{T8Rounds: 1, T8LatAppends: 5, T8Shards: 40, T8Busy: 4, T8IdleWindow: 2 * time.Second, T8IdleAfter: time.Second,
	T8FanShards: 10, T8FanSubs: 5, T8FanRate: 20, T8FanWindow: 2 * time.Second, T8Backlog: 2000, T8BacklogShards: 4}

// TestTarget8Smoke runs target 8, shrunk: every row is measured and the
// diagnostics name each part. It asserts no figure.
func TestTarget8Smoke(t *testing.T) {
	dir := t.TempDir()
	bin, err := rolloutdproc.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bench.json")
	args := []string{"--inprocess", "--store", "mem://", "--compare", "--targets", "8", "--json", out,
		"--rolloutd-bin", bin, "--progress", "off"}
	rep, _ := runCompare(t, args, t8SmokeSizes, out, 3*time.Minute)
	var ids []string
	for _, c := range rep.Targets {
		ids = append(ids, c.ID)
		if c.Value == nil {
			t.Errorf("target %s not measured: %s", c.ID, c.Detail)
		}
	}
	if got, want := strings.Join(ids, ","), "8a1,8a2,8b,8c,8d"; got != want {
		t.Errorf("targets %s, want %s", got, want)
	}
	diag := strings.Join(rep.Diagnostics, "\n")
	for _, want := range []string{"latency round 1", "idle cost: per idle shard per second", "fan-out: 5 subscribers", "throughput round 1"} {
		if !strings.Contains(diag, want) {
			t.Errorf("diagnostics lack %q:\n%s", want, diag)
		}
	}
}

// Target 8 starts an Azurite and processes of its own: a plain --compare,
// or one against a --target, must not run it.
func TestT8RunsOnlyWhenNamedAndLocal(t *testing.T) {
	cases := []struct {
		name string
		cfg  config
		runs bool
	}{
		{"default --compare", config{}, false},
		{"other targets", config{Targets: []string{"1", "7"}}, false},
		{"named", config{Targets: []string{"8"}}, true},
		{"named with a remote target", config{Targets: []string{"8"}, Target: "h:1"}, false},
	}
	for _, c := range cases {
		if why := t8Refused(&c.cfg); (why == "") != c.runs {
			t.Errorf("%s: refused %q, want runs=%v", c.name, why, c.runs)
		}
	}
}

// TestShardOfName: the per-shard op counter finds the shard of every blob
// name under shards/, and no shard in others.
func TestShardOfName(t *testing.T) {
	for name, want := range map[string]string{
		"shards/a/_manifest":                              "a",
		"shards/exp-1/actor-2/_l/000000000000001f":        "exp-1/actor-2",
		"shards/x/y/_g/0000000000000003-000000000000001f": "x/y",
		"shards/x/":             "",
		"consumers/sub/trainer": "",
	} {
		got, ok := shardOfName(name)
		if got != want || ok != (want != "") {
			t.Errorf("shardOfName(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
