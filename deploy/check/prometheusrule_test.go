package check

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// The Prometheus Operator's own API types (monitoring.coreos.com/v1),
// registered in the package's strict scheme: every PrometheusRule under
// deploy/k8s decodes strictly, so a misspelled field fails like one in a
// Deployment.
func init() {
	scheme.AddKnownTypes(monitoringv1.SchemeGroupVersion, &monitoringv1.PrometheusRule{}, &monitoringv1.PodMonitor{})
}

const rulesDir = "monitoring"

// alertConditions are what the rules must alert on: the conditions
// docs/security.md says to alert on, and those docs/operations.md does.
// Each is a metric (and a matcher) that some alert's expression selects.
var alertConditions = []struct {
	what, metric, matcher string
}{
	{"serving certificate expiry (docs/security.md)", "rolloutd_tls_certificate_expiry_timestamp_seconds", ""},
	{"TLS reload failures (docs/security.md)", "rolloutd_tls_reload_failures_total", ""},
	{"policy reload failures (docs/security.md)", "rolloutd_authz_policy_reload_failures_total", ""},
	{"revoked streams (docs/security.md)", "rolloutd_streams_revoked_total", ""},
	{"fence storms", "rolloutd_writer_fences_total", ""},
	{"DATA_LOSS answers", "rolloutd_rpc_duration_seconds_count", `code="DataLoss"`},
	{"OUTCOME_UNKNOWN answers", "rolloutd_rpc_error_reasons_total", `reason="OUTCOME_UNKNOWN"`},
	{"backpressure", "rolloutd_rpc_error_reasons_total", `reason="BACKPRESSURE"`},
	{"shutdown timeouts", "rolloutd_shutdown_timeouts_total", ""},
	{"a failed local store", "rolloutd_store_failed", ""},
	{"a full local store", "rolloutd_rpc_error_reasons_total", `reason="STORE_FULL"`},
	{"a target down", "up", `job="` + scrapeJob + `"`},
	{"Azure throttling", "rolloutd_blob_tries_total", `status=~"429|503"`},
	{"a merge backlog", "rolloutd_shard_generations_max", ""},
	{"request-budget saturation", "rolloutd_request_budget_in_use_bytes", ""},
	{"refusals for memory", "rolloutd_admission_refusals_total", `reason=~"budget|connection_share|identity_share"`},
	{"Append errors (SLO)", "rolloutd:append_errors:ratio_rate5m", ""},
	{"Append latency (SLO)", "rolloutd:append_slow:ratio_rate5m", ""},
	{"the purge CronJob failing", "kube_cronjob_status_last_successful_time", `cronjob="rolloutd-purge"`},
	{"the purge CronJob not running", "kube_cronjob_status_last_schedule_time", `cronjob="rolloutd-purge"`},
}

// renderRules renders deploy/k8s/monitoring and returns its one
// PrometheusRule.
func renderRules(t *testing.T) *monitoringv1.PrometheusRule {
	t.Helper()
	_, b := renderOnDisk(t, rulesDir)
	var rules []*monitoringv1.PrometheusRule
	for _, o := range b.objects {
		switch o := o.(type) {
		case *monitoringv1.PrometheusRule:
			rules = append(rules, o)
		case *monitoringv1.PodMonitor:
			// TestPodMonitorScrapesTheServer checks it.
		default:
			t.Errorf("%s renders %s; want only a PrometheusRule and a PodMonitor", rulesDir, describe(o))
		}
	}
	if len(rules) != 1 {
		t.Fatalf("%s renders %d PrometheusRules, want 1", rulesDir, len(rules))
	}
	if rules[0].Namespace != "rolloutd" {
		t.Errorf("PrometheusRule/%s is in namespace %q, want rolloutd", rules[0].Name, rules[0].Namespace)
	}
	return rules[0]
}

// ruleProblems checks a PrometheusRule as Prometheus would load it, and
// returns the problems and the metric names (with their matchers) the
// alerts select.
func ruleProblems(r *monitoringv1.PrometheusRule) (problems []string, selectors map[string][]string) {
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	selectors = map[string][]string{}

	// Prometheus' own rule-file validation (what promtool check rules and
	// the operator's admission webhook run): groups, names, durations,
	// label and annotation templates, and expressions.
	spec, err := yaml.Marshal(r.Spec)
	if err != nil {
		add("marshal: %v", err)
		return problems, selectors
	}
	p := parser.NewParser(parser.Options{})
	if _, errs := rulefmt.Parse(spec, false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil))); len(errs) > 0 {
		for _, e := range errs {
			add("rulefmt: %v", e)
		}
	}

	recorded := recordedNames(r)
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			name := g.Name + "/" + rule.Alert
			if rule.Alert == "" {
				name = g.Name + "/" + rule.Record
				if !recordingName.MatchString(rule.Record) {
					add("%s: a recording rule's name must read level:metric:operations (rolloutd:...:...)", name)
				}
			}
			expr, err := p.ParseExpr(rule.Expr.String())
			if err != nil {
				add("%s: expr does not parse: %v", name, err)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					var ms []string
					for _, m := range vs.LabelMatchers {
						if m.Name != model.MetricNameLabel {
							ms = append(ms, m.String())
						}
					}
					selectors[vs.Name] = append(selectors[vs.Name], strings.Join(ms, ","))
				}
				return nil
			})
			if rule.Alert == "" {
				continue
			}
			problems = append(problems, runbookProblems(name, rule.Annotations["runbook_url"])...)
			problems = append(problems, sloProblems(name, rule.Labels["slo"], expr)...)
			switch rule.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				add("%s: severity %q, want critical, warning or info", name, rule.Labels["severity"])
			}
			if rule.Annotations["summary"] == "" || rule.Annotations["description"] == "" {
				add("%s: needs a summary and a description", name)
			}
		}
	}
	for _, n := range sortedKeys(selectors) {
		problems = append(problems, metricNameProblem(n, recorded)...)
	}
	for _, c := range alertConditions {
		if !slices.ContainsFunc(selectors[c.metric], func(ms string) bool { return strings.Contains(ms, c.matcher) }) {
			add("no alert on %s (%s%s)", c.what, c.metric, map[bool]string{true: "", false: "{" + c.matcher + "}"}[c.matcher == ""])
		}
	}
	return problems, selectors
}

// TestPrometheusRulesLoad renders the alert rules, validates them as
// Prometheus does, and requires an alert for each condition the docs name.
func TestPrometheusRulesLoad(t *testing.T) {
	r := renderRules(t)
	problems, selectors := ruleProblems(r)
	for _, p := range problems {
		t.Error(p)
	}
	alerts, records := 0, 0
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" {
				alerts++
			} else {
				records++
			}
		}
	}
	t.Logf("PrometheusRule/%s: %d groups, %d alerts, %d recording rules; every expression parses; metrics: %v", r.Name, len(r.Spec.Groups), alerts, records, sortedKeys(selectors))
}

// Each rule check fires on a broken copy.
func TestPrometheusRuleChecksFire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(r *monitoringv1.PrometheusRule)
		want    string
	}{
		{"expression that does not parse", func(r *monitoringv1.PrometheusRule) {
			r.Spec.Groups[0].Rules[0].Expr.StrVal = "sum by (namespace (rolloutd_store_failed)"
		}, "does not parse"},
		{"template that does not parse", func(r *monitoringv1.PrometheusRule) {
			r.Spec.Groups[0].Rules[0].Annotations["summary"] = "on {{ $labels.pod }"
		}, "rulefmt"},
		{"no severity", func(r *monitoringv1.PrometheusRule) { delete(r.Spec.Groups[0].Rules[0].Labels, "severity") }, "severity"},
		{"runbook anchor misspelled", func(r *monitoringv1.PrometheusRule) {
			r.Spec.Groups[0].Rules[0].Annotations["runbook_url"] = runbookURL + "#rolloutddataloos"
		}, "anchor #rolloutddataloos is no heading of docs/runbooks.md"},
		{"runbook anchor of another alert", func(r *monitoringv1.PrometheusRule) {
			r.Spec.Groups[0].Rules[0].Annotations["runbook_url"] = runbookURL + "#rolloutdstorefull"
		}, "is not the alert's own section #rolloutddataloss"},
		{"runbook elsewhere", func(r *monitoringv1.PrometheusRule) {
			r.Spec.Groups[0].Rules[0].Annotations["runbook_url"] = "https://example.com/runbooks.md#rolloutddataloss"
		}, "does not point into"},
		{"no runbook", func(r *monitoringv1.PrometheusRule) { delete(r.Spec.Groups[0].Rules[0].Annotations, "runbook_url") }, "no runbook_url"},
		{"external metric misspelled", func(r *monitoringv1.PrometheusRule) {
			setExpr(r, "RolloutdPurgeNotScheduled", `time() - max by (namespace, cronjob) (kube_cronjob_status_last_schedule_tme{cronjob="rolloutd-purge"}) > 26 * 3600`)
		}, "metric kube_cronjob_status_last_schedule_tme is neither rolloutd's"},
		{"recorded name misspelled", func(r *monitoringv1.PrometheusRule) {
			setExpr(r, "RolloutdAppendErrorBudgetBurnSlow", `rolloutd:append_errors:ratio_rate3days > (1 * 0.001) and rolloutd:append_errors:ratio_rate6h > (1 * 0.001)`)
		}, "rolloutd:append_errors:ratio_rate3days looks recorded but no recording rule defines it"},
		{"SLO threshold drifts from the objective", func(r *monitoringv1.PrometheusRule) {
			setExpr(r, "RolloutdAppendLatencyBudgetBurnSlow", `rolloutd:append_slow:ratio_rate3d > (1 * 0.001) and rolloutd:append_slow:ratio_rate6h > (1 * 0.01)`)
		}, "the budget of slo append-latency (objective 0.99) is 0.01"},
		{"SLO alert on the other SLO's ratios", func(r *monitoringv1.PrometheusRule) {
			setExpr(r, "RolloutdAppendLatencyBudgetBurnSlow", `rolloutd:append_errors:ratio_rate3d > (1 * 0.01) and rolloutd:append_slow:ratio_rate6h > (1 * 0.01)`)
		}, "not slo append-latency's recorded ratios"},
		{"recording rule badly named", func(r *monitoringv1.PrometheusRule) {
			for gi := range r.Spec.Groups {
				for ri := range r.Spec.Groups[gi].Rules {
					if r.Spec.Groups[gi].Rules[ri].Record == "rolloutd:append_errors:ratio_rate5m" {
						r.Spec.Groups[gi].Rules[ri].Record = "append_errors_ratio_rate5m"
					}
				}
			}
		}, "must read level:metric:operations"},
		{"DataLoss alert dropped", func(r *monitoringv1.PrometheusRule) {
			r.Spec.Groups[0].Rules = slices.DeleteFunc(r.Spec.Groups[0].Rules, func(rl monitoringv1.Rule) bool { return rl.Alert == "RolloutdDataLoss" })
		}, `no alert on DATA_LOSS answers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderRules(t)
			tc.breakIt(r)
			problems, _ := ruleProblems(r)
			if got := strings.Join(problems, "\n"); !strings.Contains(got, tc.want) {
				t.Errorf("want a problem mentioning %q, got:\n%s", tc.want, got)
			}
		})
	}
}

// setExpr replaces the expression of the alert named alert.
func setExpr(r *monitoringv1.PrometheusRule, alert, expr string) {
	for gi := range r.Spec.Groups {
		for ri := range r.Spec.Groups[gi].Rules {
			if r.Spec.Groups[gi].Rules[ri].Alert == alert {
				r.Spec.Groups[gi].Rules[ri].Expr = intstr.FromString(expr)
				return
			}
		}
	}
	panic("no alert " + alert)
}

// A misspelled field in the PrometheusRule fails strict decoding with the
// operator's types.
func TestMisspelledPrometheusRuleFails(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(k8sDir(), rulesDir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeManifests(data); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	for typo, with := range map[string]string{"groups:": "group:", "annotations:": "anotations:", "- alert: RolloutdDataLoss": "- alerts: RolloutdDataLoss"} {
		bad := strings.Replace(string(data), typo, with, 1)
		if bad == string(data) {
			t.Fatalf("typo %q did not apply", typo)
		}
		if _, err := decodeManifests([]byte(bad)); err == nil || !runtime.IsStrictDecodingError(unwrapAll(err)) {
			t.Errorf("a misspelled %q decoded: %v", typo, err)
		}
	}
}

// TestPrometheusRuleMetricsAreExported starts the binary the Dockerfile
// builds with TLS, mutual TLS and a policy (so that the security metrics
// exist) on a local store, and requires every metric an alert selects in
// its /metrics.
func TestPrometheusRuleMetricsAreExported(t *testing.T) {
	_, selectors := ruleProblems(renderRules(t))
	bin, _ := buildImageBinary(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, "deploycheck-ca")
	cert, key := ca.Server(t, "localhost").Write(t, dir)
	caFile := filepath.Join(dir, "ca.pem")
	testpki.WriteFile(t, caFile, ca.PEM)
	policy := filepath.Join(dir, "policy.yaml")
	testpki.WriteFile(t, policy, []byte("grants:\n  - identities: [\"spiffe://deploycheck/reader\"]\n    shardPrefixes: [deploycheck]\n    verbs: [get]\n"))
	grpcAddr, metricsAddr := freePort(t), freePort(t)
	p := startProc(t, dir, []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}, bin, "--listen="+grpcAddr, "--metrics-listen="+metricsAddr,
		"--store="+filepath.Join(dir, "data"), "--tls-cert="+cert, "--tls-key="+key, "--tls-client-ca="+caFile, "--authz-file="+policy)
	waitForMetrics(t, p, "http://"+metricsAddr+"/metrics")
	// One RPC over mTLS, so that the RPC histogram has a series.
	client := ca.ClientURI(t, "spiffe://deploycheck/reader").TLS(t)
	cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{client}, RootCAs: ca.Pool(), ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health Check over mTLS: %v", err)
	}
	exported := scrapeMetricNames(t, "http://"+metricsAddr+"/metrics")
	if missing := unexported(selectors, exported); len(missing) > 0 {
		t.Errorf("the alert rules select metrics that rolloutd's /metrics does not export: %v", missing)
	} else {
		own := 0
		for name := range selectors {
			if strings.HasPrefix(name, rolloutdMetricPrefix) {
				own++
			}
		}
		t.Logf("/metrics (under mTLS with a policy) exports all %d rolloutd metrics the rules select (the %d others are recorded or external)", own, len(selectors)-own)
	}
}

// unexported lists the rolloutd metrics the rules select that rolloutd
// does not export. Recorded and external names are ruleProblems' matter.
func unexported(selectors map[string][]string, exported map[string]bool) []string {
	var missing []string
	for name := range selectors {
		if strings.HasPrefix(name, rolloutdMetricPrefix) && !exported[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

// A misspelled rolloutd metric is caught by the exported-metrics check,
// not waved through as recorded or external.
func TestMisspelledRolloutdMetricFails(t *testing.T) {
	r := renderRules(t)
	setExpr(r, "RolloutdMergeBacklog", "max by (namespace, pod) (rolloutd_shard_generation_max) > 64")
	problems, selectors := ruleProblems(r)
	exported := map[string]bool{}
	for name := range selectors {
		exported[name] = true
	}
	delete(exported, "rolloutd_shard_generation_max") // what /metrics would say
	if got := unexported(selectors, exported); !slices.Equal(got, []string{"rolloutd_shard_generation_max"}) {
		t.Errorf("unexported = %v, want the misspelled name", got)
	}
	for _, p := range problems {
		if strings.Contains(p, "rolloutd_shard_generation_max") {
			t.Errorf("ruleProblems should leave rolloutd names to /metrics: %s", p)
		}
	}
}

// waitForMetrics scrapes url until it answers, while p runs.
func waitForMetrics(t *testing.T, p *proc, url string) map[string]bool {
	t.Helper()
	for i := 0; ; i++ {
		if p.exited() {
			t.Fatalf("rolloutd exited (%v):\n%s", p.err, p.out.String())
		}
		if strings.Contains(p.out.String(), `"rolloutd started"`) || i > 300 {
			return scrapeMetricNames(t, url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
