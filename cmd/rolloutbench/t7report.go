package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// t7RowDef is one of target 7's rows: the ratios, each computed
// within a round and then taken as the median of the rounds.
type t7RowDef struct {
	id, what, op string
	want         float64
	az           bool // an Azurite row
	val          func(t7Round) float64
}

func t7RowDefs(sz compareSizes) []t7RowDef {
	wide := fmt.Sprintf("%d clients over %d shards", sz.T7Clients, sz.T7Shards)
	one := fmt.Sprintf("%d clients on one shard", sz.T7Clients)
	return []t7RowDef{
		{"7a", "rolloutd process, embedded, " + wide + ": CPU per append (µs)", "<=", 250, false,
			func(r t7Round) float64 { return r.Wide.serverUS() }},
		{"7b", "rolloutd process, embedded, " + one + ": CPU per append (µs)", "<=", 80, false,
			func(r t7Round) float64 { return r.One.serverUS() }},
		{"7c", "rolloutd process, embedded: appends/s, " + wide + " / " + one, ">=", 0.6, false,
			func(r t7Round) float64 { return r.Wide.rate() / r.One.rate() }},
		{"7d", "rolloutd process, embedded, single client: p50 over gRPC − local one-write floor p50 (ms)", "<=", 0.4, false,
			func(r t7Round) float64 { return r.Single.P50ms - r.LocalFloor.P50ms }},
		{"7e", "rolloutd process, Azurite, single client: p50 over gRPC − in-process writer p50 (ms)", "<=", 0.4, true,
			func(r t7Round) float64 { return r.AzSingle.P50ms - r.AzInProcess.P50ms }},
		{"7f", "rolloutd process, Azurite, single client: CPU per append / floor1's CPU per PUT (own process)", "<=", 2, true,
			func(r t7Round) float64 { return r.AzSingle.serverUS() / r.AzFloor.serverUS() }},
		{"7g", "rolloutd process, Azurite, single client: p50 over gRPC / floor1 p50 (row 1f)", "<=", 1.3, true,
			func(r t7Round) float64 { return r.AzSingle.P50ms / r.AzFloor.P50ms }},
	}
}

// t7Rows judges the candidate: B's rounds when given (A then the
// baseline beside it), else A's.
func t7Rows(sz compareSizes, az bool, a, b []t7Round) []targetCheck {
	judged, base := a, []t7Round(nil)
	if len(b) > 0 {
		judged, base = b, a
	}
	var rows []targetCheck
	for _, d := range t7RowDefs(sz) {
		if d.az && !az {
			rows = append(rows, skipped(d.id, d.what, d.op, d.want, "--t7-azurite=false"))
			continue
		}
		vals := t7Values(judged, d.val)
		m := median(vals)
		detail := "median of rounds " + fmtVals(vals) + "; a shared machine: noisy"
		if base != nil {
			bv := t7Values(base, d.val)
			detail = fmt.Sprintf("B (--rolloutd-bin-b) rounds %s; A (--rolloutd-bin) median %.3g, rounds %s; B/A %.2f; a shared machine: noisy",
				fmtVals(vals), median(bv), fmtVals(bv), m/median(bv))
		}
		rows = append(rows, check(d.id, d.what, m, d.op, d.want, detail))
	}
	return rows
}

func t7Values(rs []t7Round, f func(t7Round) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// median of vs, NaNs left out; NaN when none is left.
func median(vs []float64) float64 {
	var s []float64
	for _, v := range vs {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			s = append(s, v)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtVals(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%.3g", v)
	}
	return strings.Join(parts, ", ")
}

// t7Load is one line of target 7's per-load table.
type t7Load struct {
	name string
	az   bool
	fig  func(t7Round) t7Fig
}

func t7Loads(sz compareSizes) []t7Load {
	return []t7Load{
		{fmt.Sprintf("embedded %d clients, %d shards", sz.T7Clients, sz.T7Shards), false, func(r t7Round) t7Fig { return r.Wide }},
		{fmt.Sprintf("embedded %d clients, 1 shard", sz.T7Clients), false, func(r t7Round) t7Fig { return r.One }},
		{"embedded 1 client", false, func(r t7Round) t7Fig { return r.Single }},
		{"local one-write floor (own process)", false, func(r t7Round) t7Fig { return r.LocalFloor }},
		{"Azurite 1 client", true, func(r t7Round) t7Fig { return r.AzSingle }},
		{"Azurite 1 client, in-process writer", true, func(r t7Round) t7Fig { return r.AzInProcess }},
		{"Azurite floor1 PUT (own process)", true, func(r t7Round) t7Fig { return r.AzFloor }},
		{fmt.Sprintf("Azurite %d clients, 1 shard", sz.T7Clients), true, func(r t7Round) t7Fig { return r.AzOne }},
	}
}

// t7Columns are the per-load table's figures.
var t7Columns = []struct {
	head string
	f    func(t7Fig) float64
}{
	{"rolloutd CPU/append µs", t7Fig.serverUS},
	{"(its process_cpu_seconds_total)", func(f t7Fig) float64 { return f.perOpUS(f.MetricCPU) }},
	{"load process CPU/append µs", func(f t7Fig) float64 { return f.perOpUS(f.LoadCPU) }},
	{"appends/s", t7Fig.rate},
	{"p50 ms", func(f t7Fig) float64 { return f.P50ms }},
	{"rolloutd idle CPU ms/s", func(f t7Fig) float64 {
		if f.IdleCPU == 0 {
			return math.NaN()
		}
		return f.IdleCPU * 1000
	}},
}

// t7Table prints every load's medians per binary (and B/A), as lines for
// the report's diagnostics.
func t7Table(sz compareSizes, az bool, bins []t7Bin, rounds map[string][]t7Round) []string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "target 7 per load, medians of %d rounds (rolloutd's CPU from /proc/PID/stat; a floor's CPU is its own process's; the load process is this one; a shared machine: noisy):\n", max(1, sz.T7Rounds))
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "load\tbinary")
	for _, c := range t7Columns {
		fmt.Fprint(tw, "\t"+c.head)
	}
	fmt.Fprintln(tw)
	for _, l := range t7Loads(sz) {
		if l.az && !az {
			continue
		}
		meds := map[string][]float64{}
		for _, bin := range bins {
			fmt.Fprintf(tw, "%s\t%s", l.name, bin.label)
			for _, c := range t7Columns {
				m := median(t7Values(rounds[bin.label], func(r t7Round) float64 { return c.f(l.fig(r)) }))
				meds[bin.label] = append(meds[bin.label], m)
				fmt.Fprintf(tw, "\t%s", fmtFig(m))
			}
			fmt.Fprintln(tw)
		}
		if len(bins) == 2 {
			fmt.Fprintf(tw, "%s\tB/A", l.name)
			for i := range t7Columns {
				fmt.Fprintf(tw, "\t%s", fmtFig(meds["B"][i]/meds["A"][i]))
			}
			fmt.Fprintln(tw)
		}
	}
	tw.Flush()
	return strings.Split(strings.TrimRight(sb.String(), "\n"), "\n")
}

func fmtFig(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.3g", v)
}
