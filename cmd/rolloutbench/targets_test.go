package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTargetTable checks that every target of the table can be selected
// by its id, alone, and that its rows are its own.
func TestTargetTable(t *testing.T) {
	seen := map[string]string{}
	for _, tg := range targetTable {
		if tg.run == nil || len(tg.checks) == 0 {
			t.Errorf("target %s: no run or no rows", tg.id)
		}
		for _, row := range tg.checks {
			if other, dup := seen[row]; dup {
				t.Errorf("row %s belongs to targets %s and %s", row, other, tg.id)
			}
			seen[row] = tg.id
		}
		cfg, err := parseConfig([]string{"--inprocess", "--compare", "--targets", tg.id}, noEnv, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("--targets %s: %v", tg.id, err)
		}
		b := &bench{cfg: cfg}
		for _, other := range targetTable {
			if got, want := b.want(other.id), other.id == tg.id; got != want {
				t.Errorf("--targets %s: target %s selected %v, want %v", tg.id, other.id, got, want)
			}
		}
	}
	all, err := parseConfig([]string{"--inprocess", "--compare"}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(all.Targets, ","), strings.Join(targetIDs(), ","); got != want {
		t.Errorf("default --targets %s, want every target %s", got, want)
	}
	_, err = parseConfig([]string{"--inprocess", "--compare", "--targets", "1,9"}, noEnv, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `"9" is not one of 1, 2, 3, 4, 5, 6, 7, 8`) {
		t.Errorf("--targets 1,9: %v, want an error naming 9 and the ids", err)
	}
}

// TestTargetRowsCannotGoMissing checks that a target's rows come out in the
// table's order and that a row missing, repeated or foreign is an error,
// not a shorter table.
func TestTargetRowsCannotGoMissing(t *testing.T) {
	tg := target{id: "9", checks: []string{"9a", "9b"}}
	rows := func(ids ...string) []targetCheck {
		var cs []targetCheck
		for _, id := range ids {
			cs = append(cs, skipped(id, "what", "<=", 1, "why"))
		}
		return cs
	}
	got, err := tg.order(rows("9b", "9a"))
	if err != nil || len(got) != 2 || got[0].ID != "9a" || got[1].ID != "9b" {
		t.Errorf("order(9b, 9a) = %v, %v; want 9a, 9b", got, err)
	}
	for _, bad := range [][]string{{"9a"}, {"9a", "9b", "9b"}, {"9a", "9b", "8a"}, nil} {
		if _, err := tg.order(rows(bad...)); err == nil {
			t.Errorf("order(%v): no error", bad)
		}
	}
}

// TestRowsDoNotDependOnLabels runs target 1 (its diagnostic and its
// per-append stretch included) with every phase renamed, and checks that
// each of its rows is still measured from its phases: a row reads typed
// results, never a phase found by its display name.
func TestRowsDoNotDependOnLabels(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.json")
	args := []string{"--inprocess", "--store", "file://" + filepath.Join(dir, "data"), "--compare", "--targets", "1", "--json", out, "--progress", "off"}
	cfg, err := parseConfig(args, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.sizes = smokeSizes
	cfg.relabel = func(name string) string { return "renamed " + strings.ToLower(name) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	if err := runConfig(ctx, cfg, args, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatalf("run: %v\n%s", err, stdout.String())
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Phases {
		if !strings.HasPrefix(p.Name, "renamed ") {
			t.Errorf("phase %q was not renamed", p.Name)
		}
	}
	var ids []string
	for _, c := range rep.Targets {
		ids = append(ids, c.ID)
		if c.Value == nil || *c.Value <= 0 || math.IsInf(*c.Value, 0) {
			t.Errorf("row %s (%s) not measured from its phases: value %v, %s", c.ID, c.What, c.Value, c.Detail)
		}
	}
	if !slices.Equal(ids, targetTable[0].checks) {
		t.Errorf("rows %v, want %v", ids, targetTable[0].checks)
	}
	if len(rep.Diagnostics) != 1 || strings.Contains(rep.Diagnostics[0], "NaN") || strings.Contains(rep.Diagnostics[0], "Inf") {
		t.Errorf("diagnostics %q, want one line of figures", rep.Diagnostics)
	}
}

// TestCompareKeepsThePhasesWhenRowsGoMissing runs --compare with a target
// that loses a row: the run fails naming that target and the row, but its
// report still holds every phase measured and every row reported.
func TestCompareKeepsThePhasesWhenRowsGoMissing(t *testing.T) {
	ran := func(phase string, rows ...string) func(context.Context, *bench) (*outcome, error) {
		return func(context.Context, *bench) (*outcome, error) {
			o := &outcome{phases: []phaseResult{{Name: phase}}}
			for _, id := range rows {
				o.rows = append(o.rows, skipped(id, "what", "<=", 1, "why"))
			}
			return o, nil
		}
	}
	saved := targetTable
	defer func() { targetTable = saved }()
	targetTable = []target{
		{"1", []string{"1a", "1b"}, ran("P1", "1a")}, // loses 1b
		{"2", []string{"2"}, ran("P2", "2")},
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.json")
	args := []string{"--inprocess", "--store", "file://" + filepath.Join(dir, "data"), "--compare", "--json", out, "--progress", "off"}
	cfg, err := parseConfig(args, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout bytes.Buffer
	err = runConfig(ctx, cfg, args, &stdout, &bytes.Buffer{})
	if !errors.Is(err, errRows) || !strings.Contains(err.Error(), "target 1 did not report row 1b") {
		t.Errorf("run: %v, want the bench bug naming target 1 and row 1b", err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no report written: %v\n%s", err, stdout.String())
	}
	var rep report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	var phases, rows []string
	for _, p := range rep.Phases {
		phases = append(phases, p.Name)
	}
	for _, c := range rep.Targets {
		rows = append(rows, c.ID)
	}
	if !slices.Equal(phases, []string{"P1", "P2"}) || !slices.Equal(rows, []string{"1a", "2"}) {
		t.Errorf("report has phases %v and rows %v, want [P1 P2] and [1a 2]", phases, rows)
	}
	if !slices.ContainsFunc(rep.Diagnostics, func(d string) bool { return strings.Contains(d, "target 1 did not report row 1b") }) {
		t.Errorf("report diagnostics %q do not name the missing row", rep.Diagnostics)
	}
}
