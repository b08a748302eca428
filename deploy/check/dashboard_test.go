package check

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

const dashboardPath = "deploy/grafana/rolloutd-dashboard.json"

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// grafanaVars stand in for Grafana's template variables so that an
// expression parses as plain PromQL.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")

// dashboardMetrics parses every query of the dashboard with Prometheus' own
// PromQL parser and returns the metric names they select.
func dashboardMetrics(t *testing.T) []string {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readRepoFile(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: no title or uid", dashboardPath)
	}
	names := map[string]bool{}
	ids := map[int]bool{}
	queries := 0
	p := parser.NewParser(parser.Options{})
	for _, pn := range d.Panels {
		if ids[pn.ID] {
			t.Errorf("panel %q: duplicate id %d", pn.Title, pn.ID)
		}
		ids[pn.ID] = true
		if pn.GridPos.W <= 0 || pn.GridPos.H <= 0 || pn.GridPos.X+pn.GridPos.W > 24 {
			t.Errorf("panel %q: bad gridPos %+v", pn.Title, pn.GridPos)
		}
		if pn.Type == "timeseries" && len(pn.Targets) == 0 {
			t.Errorf("panel %q has no queries", pn.Title)
		}
		for _, tg := range pn.Targets {
			queries++
			expr, err := p.ParseExpr(grafanaVars.Replace(tg.Expr))
			if err != nil {
				t.Errorf("panel %q query %s: %v\n%s", pn.Title, tg.RefID, err, tg.Expr)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					names[vs.Name] = true
				}
				return nil
			})
			if !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q query %s ignores the $instance variable", pn.Title, tg.RefID)
			}
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	t.Logf("%s: %d panels, %d queries, all parsed as PromQL; metrics: %v", dashboardPath, len(d.Panels), queries, out)
	return out
}

// TestDashboardQueriesParse checks the dashboard's structure, parses every
// query, and requires a panel for each thing the issue lists.
func TestDashboardQueriesParse(t *testing.T) {
	metrics := dashboardMetrics(t)
	for _, want := range []string{
		"rolloutd_rpc_duration_seconds_bucket", // append/get latency percentiles
		"rolloutd_rpc_duration_seconds_count",  // appends/s
		"rolloutd_append_generations_bucket",   // generations per Append
		"rolloutd_blob_operations_total",       // group commit (put_cas), blob errors
		"rolloutd_writers_resident",            // resident writers
		"rolloutd_writer_evictions_total",      // evictions
		"rolloutd_writer_fences_total",         // fences
		"rolloutd_append_self_heals_total",     // self-heals
		"rolloutd_blob_operation_duration_seconds_bucket",
		"rolloutd_blob_tries_total",          // Azure throttling (429, 503) the SDK retried
		"rolloutd_records_scanned_total",     // records scanned
		"rolloutd_rpc_decode_failures_total", // requests that do not decode
	} {
		if !slices.Contains(metrics, want) {
			t.Errorf("no panel queries %s", want)
		}
	}
	// Scan: its rate, errors and duration, under its method label.
	var d dashboard
	if err := json.Unmarshal(readRepoFile(t, dashboardPath), &d); err != nil {
		t.Fatal(err)
	}
	scan := map[string]bool{}
	for _, pn := range d.Panels {
		for _, tg := range pn.Targets {
			if !strings.Contains(tg.Expr, `method="Scan"`) {
				continue
			}
			switch {
			case strings.Contains(tg.Expr, `code!="OK"`):
				scan["errors"] = true
			case strings.Contains(tg.Expr, "histogram_quantile"):
				scan["duration"] = true
			case strings.Contains(tg.Expr, "_count"):
				scan["rate"] = true
			}
		}
	}
	for _, want := range []string{"rate", "errors", "duration"} {
		if !scan[want] {
			t.Errorf(`no panel shows Scan's %s (rolloutd_rpc_duration_seconds{method="Scan"})`, want)
		}
	}
}
