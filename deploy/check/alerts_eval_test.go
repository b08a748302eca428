package check

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// alertCases give each new alert series on which it must fire and series
// on which it must stay quiet, in promtool's series notation (one sample a
// step, from time 0; gauges a sample a minute, as the default 5m lookback
// needs). The alert is evaluated at `at`, and must hold (or
// stay empty) at every minute of its `for` before it, as Prometheus
// requires before firing.
var alertCases = []struct {
	alert       string
	step        string
	fire, quiet string
	at          time.Duration
}{
	{"RolloutdTargetDown", "1m",
		`up{job="rolloutd",namespace="rolloutd",pod="rolloutd-a"} 1x10 0x50`,
		`up{job="rolloutd",namespace="rolloutd",pod="rolloutd-a"} 1x60`, time.Hour},
	{"RolloutdTargetAbsent", "1m",
		`up{job="kubernetes-pods",namespace="rolloutd",pod="rolloutd-a"} 1x60`,
		`up{job="rolloutd",namespace="rolloutd",pod="rolloutd-a"} 1x60`, time.Hour},
	// 2% of Appends fail: 20x the 0.1% budget; 0.05% is within it.
	{"RolloutdAppendErrorBudgetBurn", "1m",
		appendCalls(1000, 20, 120), appendCalls(1000, 0.5, 120), 2 * time.Hour},
	// 0.3% fail over four days: 3x the budget, under the paging rates.
	{"RolloutdAppendErrorBudgetBurnSlow", "10m",
		appendCalls(10000, 30, 600), appendCalls(10000, 5, 600), 100 * time.Hour},
	// 20% of Appends over 512 ms: 20x the 1% budget; 0.5% is within it.
	{"RolloutdAppendLatencyBudgetBurn", "1m",
		appendLatency(1000, 800, 120), appendLatency(1000, 995, 120), 2 * time.Hour},
	{"RolloutdAppendLatencyBudgetBurnSlow", "10m",
		appendLatency(10000, 9700, 600), appendLatency(10000, 9950, 600), 100 * time.Hour},
	// 5% of tries throttled; 0.5%.
	{"RolloutdBlobThrottled", "1m",
		`rolloutd_blob_tries_total{namespace="rolloutd",pod="a",status="2xx"} 0+950x60
		 rolloutd_blob_tries_total{namespace="rolloutd",pod="a",status="503"} 0+30x60
		 rolloutd_blob_tries_total{namespace="rolloutd",pod="a",status="429"} 0+20x60`,
		`rolloutd_blob_tries_total{namespace="rolloutd",pod="a",status="2xx"} 0+995x60
		 rolloutd_blob_tries_total{namespace="rolloutd",pod="a",status="503"} 0+5x60`, time.Hour},
	{"RolloutdMergeBacklog", "1m",
		`rolloutd_shard_generations_max{namespace="rolloutd",pod="a"} 16x10 100x50`,
		`rolloutd_shard_generations_max{namespace="rolloutd",pod="a"} 16x30 40x30`, time.Hour},
	{"RolloutdRequestBudgetSaturated", "1m",
		`rolloutd_request_budget_bytes{namespace="rolloutd",pod="a"} 100x60
		 rolloutd_request_budget_in_use_bytes{namespace="rolloutd",pod="a"} 95x60`,
		`rolloutd_request_budget_bytes{namespace="rolloutd",pod="a"} 100x60
		 rolloutd_request_budget_in_use_bytes{namespace="rolloutd",pod="a"} 60x60`, time.Hour},
	{"RolloutdAdmissionRefusals", "1m",
		`rolloutd_admission_refusals_total{namespace="rolloutd",pod="a",reason="identity_share"} 0+180x60`,
		`rolloutd_admission_refusals_total{namespace="rolloutd",pod="a",reason="identity_share"} 0+6x60
		 rolloutd_admission_refusals_total{namespace="rolloutd",pod="a",reason="no_grants"} 0+600x60`, time.Hour},
	{"RolloutdStoreFull", "1m",
		`rolloutd_rpc_error_reasons_total{namespace="rolloutd",pod="a",method="Append",reason="STORE_FULL"} 0x10 0+5x10`,
		`rolloutd_rpc_error_reasons_total{namespace="rolloutd",pod="a",method="Append",reason="STORE_FULL"} 0x20
		 rolloutd_rpc_error_reasons_total{namespace="rolloutd",pod="a",method="Append",reason="BACKPRESSURE"} 0+5x20`, 20 * time.Minute},
	// Scheduled at 2h, last success at 1h (the run failed); quiet: the
	// success at 2h30m followed it.
	{"RolloutdPurgeFailed", "1m",
		`kube_cronjob_status_last_schedule_time{namespace="rolloutd",cronjob="rolloutd-purge"} 7200x400
		 kube_cronjob_status_last_successful_time{namespace="rolloutd",cronjob="rolloutd-purge"} 3600x400`,
		`kube_cronjob_status_last_schedule_time{namespace="rolloutd",cronjob="rolloutd-purge"} 7200x400
		 kube_cronjob_status_last_successful_time{namespace="rolloutd",cronjob="rolloutd-purge"} 9000x400`, 6 * time.Hour},
	// Never succeeded: only the schedule time exists.
	{"RolloutdPurgeFailed", "1m",
		`kube_cronjob_status_last_schedule_time{namespace="rolloutd",cronjob="rolloutd-purge"} 7200x400`,
		`kube_cronjob_status_last_schedule_time{namespace="rolloutd",cronjob="rolloutd-export"} 7200x400`, 6 * time.Hour},
	// Last scheduled at time 0, evaluated at 30h; quiet: scheduled at 24h.
	{"RolloutdPurgeNotScheduled", "1m",
		`kube_cronjob_status_last_schedule_time{namespace="rolloutd",cronjob="rolloutd-purge"} 0x1860`,
		`kube_cronjob_status_last_schedule_time{namespace="rolloutd",cronjob="rolloutd-purge"} 86400x1860`, 30 * time.Hour},
}

// evaluatedAlerts must each have a case in alertCases: those added with
// the runbooks, and RolloutdStoreFull, whose expression was checked then.
var evaluatedAlerts = []string{
	"RolloutdTargetDown", "RolloutdTargetAbsent",
	"RolloutdAppendErrorBudgetBurn", "RolloutdAppendErrorBudgetBurnSlow",
	"RolloutdAppendLatencyBudgetBurn", "RolloutdAppendLatencyBudgetBurnSlow",
	"RolloutdBlobThrottled", "RolloutdMergeBacklog", "RolloutdRequestBudgetSaturated", "RolloutdAdmissionRefusals",
	"RolloutdStoreFull", "RolloutdPurgeFailed", "RolloutdPurgeNotScheduled",
}

// appendCalls is Appends at perStep calls a step, failed of them answered
// Unavailable, for n steps.
func appendCalls(perStep, failed float64, n int) string {
	return promSeries(`rolloutd_rpc_duration_seconds_count{namespace="rolloutd",pod="a",method="Append",code="OK"}`, perStep-failed, n) +
		promSeries(`rolloutd_rpc_duration_seconds_count{namespace="rolloutd",pod="a",method="Append",code="Unavailable"}`, failed, n) +
		promSeries(`rolloutd_rpc_duration_seconds_count{namespace="rolloutd",pod="a",method="Append",code="InvalidArgument"}`, failed, n)
}

// appendLatency is perStep successful Appends a step, fast of them within
// 512 ms, for n steps.
func appendLatency(perStep, fast float64, n int) string {
	ok := `rolloutd_rpc_duration_seconds_%s{namespace="rolloutd",pod="a",method="Append",code="OK"%s}`
	return promSeries(fmt.Sprintf(ok, "bucket", `,le="0.256"`), fast/2, n) +
		promSeries(fmt.Sprintf(ok, "bucket", `,le="0.512"`), fast, n) +
		promSeries(fmt.Sprintf(ok, "bucket", `,le="+Inf"`), perStep, n) +
		promSeries(fmt.Sprintf(ok, "count", ""), perStep, n)
}

// promSeries is one counter line of a load block.
func promSeries(series string, perStep float64, n int) string {
	return series + " 0+" + formatFloat(perStep) + "x" + itoa(n) + "\n"
}

// TestAlertsFireOnlyWhenTheyShould evaluates each new alert, with the
// recording rules it reads inlined, on series that must fire it and on
// quiet ones.
func TestAlertsFireOnlyWhenTheyShould(t *testing.T) {
	r := renderRules(t)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1_000_000, Timeout: time.Minute})
	t.Cleanup(func() { _ = engine.Close() })
	tested := map[string]bool{}
	for _, tc := range alertCases {
		rule := findAlert(t, r, tc.alert)
		expr := inlineRecorded(r, rule.Expr.String())
		var hold time.Duration
		if rule.For != nil {
			d, err := model.ParseDuration(string(*rule.For))
			if err != nil {
				t.Fatalf("%s: for %q: %v", tc.alert, *rule.For, err)
			}
			hold = time.Duration(d)
		}
		tested[tc.alert] = true
		t.Run(tc.alert, func(t *testing.T) {
			for _, c := range []struct {
				series string
				fire   bool
			}{{tc.fire, true}, {tc.quiet, false}} {
				steps := evalSteps(t, engine, loadSeries(t, tc.step, c.series), expr, tc.at-hold, tc.at)
				for i, n := range steps {
					if c.fire && n == 0 {
						t.Errorf("does not fire at %v (for %v) on:\n%s", tc.at-hold+time.Duration(i)*time.Minute, hold, c.series)
						break
					}
					if !c.fire && n > 0 {
						t.Errorf("fires at %v on quiet series:\n%s", tc.at-hold+time.Duration(i)*time.Minute, c.series)
						break
					}
				}
			}
		})
	}
	for _, a := range evaluatedAlerts {
		if !tested[a] {
			t.Errorf("no firing and quiet series for %s", a)
		}
	}
	t.Logf("evaluated %d alerts on firing and quiet series", len(tested))
}

// evalSteps runs expr each minute from start to end on the loaded series
// and returns how many series it returned at each step.
func evalSteps(t *testing.T, engine *promql.Engine, series []storage.Series, expr string, start, end time.Duration) []int {
	t.Helper()
	origin := time.Unix(0, 0).UTC()
	q, err := engine.NewRangeQuery(t.Context(), memQueryable(series), nil, expr, origin.Add(start), origin.Add(end), time.Minute)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(t.Context())
	if res.Err != nil {
		t.Fatalf("%s: %v", expr, res.Err)
	}
	m, err := res.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	steps := make([]int, int((end-start)/time.Minute)+1)
	for _, s := range m {
		for _, p := range s.Floats {
			steps[int((time.UnixMilli(p.T).Sub(origin)-start)/time.Minute)]++
		}
	}
	return steps
}

// loadSeries reads one series a line in promtool's notation
// (`name{labels} 0+10x60`), a sample every step from time 0.
func loadSeries(t *testing.T, step, text string) []storage.Series {
	t.Helper()
	d, err := model.ParseDuration(step)
	if err != nil {
		t.Fatal(err)
	}
	var out []storage.Series
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		lset, vals, err := parser.NewParser(parser.Options{}).ParseSeriesDesc(strings.TrimSpace(line))
		if err != nil {
			t.Fatalf("series %q: %v", line, err)
		}
		var samples []chunks.Sample
		for i, v := range vals {
			if !v.Omitted {
				samples = append(samples, floatSample{t: int64(i) * time.Duration(d).Milliseconds(), f: v.Value})
			}
		}
		out = append(out, storage.NewListSeries(lset, samples))
	}
	return out
}

// memQueryable serves series from memory, filtered by the matchers.
func memQueryable(series []storage.Series) storage.Queryable {
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var sel []storage.Series
			for _, s := range series {
				if matchesAll(s.Labels(), ms) {
					sel = append(sel, s)
				}
			}
			slices.SortFunc(sel, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
			return &seriesSet{series: sel, i: -1}
		},
	}}
}

func matchesAll(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                      { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series              { return s.series[s.i] }
func (*seriesSet) Err() error                        { return nil }
func (*seriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is one float sample of a loaded series.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }

func findAlert(t *testing.T, r *monitoringv1.PrometheusRule, alert string) monitoringv1.Rule {
	t.Helper()
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == alert {
				return rule
			}
		}
	}
	t.Fatalf("no alert %s", alert)
	return monitoringv1.Rule{}
}

// inlineRecorded replaces each recorded name in expr with its recording
// rule's expression, so that one query evaluates both.
func inlineRecorded(r *monitoringv1.PrometheusRule, expr string) string {
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Record != "" {
				re := regexp.MustCompile(regexp.QuoteMeta(rule.Record) + `\b`)
				expr = re.ReplaceAllLiteralString(expr, "("+rule.Expr.String()+")")
			}
		}
	}
	return expr
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func itoa(n int) string { return strconv.Itoa(n) }
