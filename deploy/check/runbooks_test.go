package check

import (
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// runbookURL is where every alert's runbook_url points: the repository's
// docs/runbooks.md, at the section named after the alert.
const (
	runbookURL  = "https://github.com/rolloutd/rolloutd/blob/main/docs/runbooks.md"
	runbookPath = "docs/runbooks.md"

	rolloutdMetricPrefix = "rolloutd_"
)

// externalMetrics are the metric names the rules may use that rolloutd
// does not export, with who does. Anything else outside rolloutd_ and the
// recorded names fails, so a misspelled name cannot pass as "external".
var externalMetrics = map[string]string{
	"up":                                     "Prometheus, for every scrape target",
	"kube_cronjob_status_last_schedule_time": "kube-state-metrics (CronJob)",
	"kube_cronjob_status_last_successful_time": "kube-state-metrics (CronJob)",
}

// scrapeJob is the job label rolloutd's targets carry: the PodMonitor of
// deploy/k8s/monitoring sets jobLabel app.kubernetes.io/name (value
// rolloutd), which TestPodMonitorScrapesTheServer holds.
const scrapeJob = "rolloutd"

// slos are the objectives the burn-rate alerts hold, the one place the
// numbers live besides the expressions, which this check keeps equal.
// docs/runbooks.md, "SLOs", states them.
var slos = map[string]struct {
	objective float64 // the fraction of good Appends
	le        string  // for latency: the bucket bound a good Append is under
	recorded  string  // the recording rules' metric part
}{
	"append-errors":  {objective: 0.999, recorded: "append_errors"},
	"append-latency": {objective: 0.99, le: "0.512", recorded: "append_slow"},
}

// burnFactors are the multi-window burn rates of the SRE workbook: 14.4
// (1h/5m) and 6 (6h/30m) page, 1 (3d/6h) opens a ticket.
var burnFactors = []float64{14.4, 6, 1}

// recordingName is level:metric:operations.
var recordingName = regexp.MustCompile(`^rolloutd:[a-z0-9_]+:[a-z0-9_]+$`)

func recordedNames(r *monitoringv1.PrometheusRule) map[string]bool {
	out := map[string]bool{}
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Record != "" {
				out[rule.Record] = true
			}
		}
	}
	return out
}

// metricNameProblem says what is wrong with a metric name a rule selects:
// rolloutd's own (checked against /metrics elsewhere), recorded in the same
// PrometheusRule, or on the external allow-list.
func metricNameProblem(name string, recorded map[string]bool) []string {
	switch {
	case strings.HasPrefix(name, rolloutdMetricPrefix):
		return nil
	case strings.Contains(name, ":"):
		if !recorded[name] {
			return []string{fmt.Sprintf("metric %s looks recorded but no recording rule defines it", name)}
		}
		return nil
	case externalMetrics[name] != "":
		return nil
	}
	return []string{fmt.Sprintf("metric %s is neither rolloutd's (%s*), recorded here, nor on the external allow-list (externalMetrics)", name, rolloutdMetricPrefix)}
}

// runbookAnchors are the anchors GitHub gives the headings of
// docs/runbooks.md.
var runbookAnchors = sync.OnceValues(func() (map[string]bool, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(runbookPath)))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if !inFence && strings.HasPrefix(line, "#") {
			out[githubAnchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return out, nil
})

// githubAnchor is the id GitHub gives a Markdown heading: lowercase, spaces
// to hyphens, and every character but letters, digits, hyphens and
// underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbookProblems checks an alert's runbook_url: docs/runbooks.md, at an
// anchor that exists and is the alert's own section.
func runbookProblems(name, raw string) []string {
	alert := name[strings.LastIndex(name, "/")+1:]
	if raw == "" {
		return []string{name + ": no runbook_url annotation"}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return []string{fmt.Sprintf("%s: runbook_url %q: %v", name, raw, err)}
	}
	var problems []string
	if base := strings.TrimSuffix(raw, "#"+u.Fragment); base != runbookURL {
		problems = append(problems, fmt.Sprintf("%s: runbook_url %q does not point into %s", name, raw, runbookURL))
	}
	anchors, err := runbookAnchors()
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("%s: %v", name, err))
	case !anchors[u.Fragment]:
		problems = append(problems, fmt.Sprintf("%s: runbook_url anchor #%s is no heading of %s", name, u.Fragment, runbookPath))
	case u.Fragment != githubAnchor(alert):
		problems = append(problems, fmt.Sprintf("%s: runbook_url anchor #%s is not the alert's own section #%s", name, u.Fragment, githubAnchor(alert)))
	}
	return problems
}

// sloProblems checks a burn-rate alert (one labelled slo) against slos:
// every threshold is a burn factor times the objective's error budget.
func sloProblems(name, slo string, expr parser.Expr) []string {
	if slo == "" {
		return nil
	}
	s, ok := slos[slo]
	if !ok {
		return []string{fmt.Sprintf("%s: label slo=%q names no SLO of %v", name, slo, sortedKeys(slos))}
	}
	var problems []string
	budget := 1 - s.objective
	n := 0
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch node := node.(type) {
		case *parser.BinaryExpr:
			f, fok := unparen(node.LHS).(*parser.NumberLiteral)
			b, bok := unparen(node.RHS).(*parser.NumberLiteral)
			if node.Op != parser.MUL || !fok || !bok {
				return nil
			}
			n++
			if math.Abs(b.Val-budget) > 1e-9 {
				problems = append(problems, fmt.Sprintf("%s: threshold %v * %v: the budget of slo %s (objective %v) is %v", name, f.Val, b.Val, slo, s.objective, budget))
			}
			if !slices.Contains(burnFactors, f.Val) {
				problems = append(problems, fmt.Sprintf("%s: burn factor %v is not one of %v", name, f.Val, burnFactors))
			}
		case *parser.VectorSelector:
			if !strings.Contains(node.Name, ":"+s.recorded+":") {
				problems = append(problems, fmt.Sprintf("%s: selects %s, not slo %s's recorded ratios (rolloutd:%s:...)", name, node.Name, slo, s.recorded))
			}
		}
		return nil
	})
	if n == 0 {
		problems = append(problems, fmt.Sprintf("%s: no threshold written as factor * budget", name))
	}
	return problems
}

func unparen(e parser.Expr) parser.Expr {
	for {
		p, ok := e.(*parser.ParenExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

// recordingProblems checks what recording rules select: the latency
// ratios count Appends under the SLO's bucket bound, and every ratio's
// window is in its name.
func recordingProblems(r *monitoringv1.PrometheusRule) []string {
	var problems []string
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Record == "" {
				continue
			}
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(rule.Expr.String())
			if err != nil {
				continue // reported by ruleProblems
			}
			for slo, s := range slos {
				if !strings.Contains(rule.Record, ":"+s.recorded+":") {
					continue
				}
				window := rule.Record[strings.LastIndex(rule.Record, "_rate")+len("_rate"):]
				parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
					switch node := node.(type) {
					case *parser.MatrixSelector:
						if got := model.Duration(node.Range).String(); got != window {
							problems = append(problems, fmt.Sprintf("%s: window %s in a rule named for %s", rule.Record, got, window))
						}
					case *parser.VectorSelector:
						if s.le != "" && strings.HasSuffix(node.Name, "_bucket") &&
							!slices.ContainsFunc(node.LabelMatchers, func(m *labels.Matcher) bool { return m.Name == "le" && m.Value == s.le }) {
							problems = append(problems, fmt.Sprintf("%s: slo %s counts Appends under le=%q; this selects %s", rule.Record, slo, s.le, node.String()))
						}
					}
					return nil
				})
			}
		}
	}
	return problems
}

// TestRunbooksCoverTheAlerts requires one section of docs/runbooks.md per
// alert, and no section for an alert that does not exist, each with what
// it means, how to confirm it and what to do.
func TestRunbooksCoverTheAlerts(t *testing.T) {
	r := renderRules(t)
	alerts := map[string]bool{}
	for _, g := range r.Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert != "" {
				alerts[rule.Alert] = true
			}
		}
	}
	for _, p := range recordingProblems(r) {
		t.Error(p)
	}
	sections := runbookSections(t)
	for a := range alerts {
		body, ok := sections[a]
		if !ok {
			t.Errorf("%s has no section ### %s", runbookPath, a)
			continue
		}
		for _, part := range []string{"**What it means.**", "**Confirm.**", "**What to do.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("%s, section %s: no %s", runbookPath, a, part)
			}
		}
	}
	for s := range sections {
		if !alerts[s] {
			t.Errorf("%s has a section for %s, which is no alert of %s", runbookPath, s, rulesDir)
		}
	}
	doc := string(readRepoFile(t, runbookPath))
	for name, s := range slos {
		want := strconv.FormatFloat(s.objective*100, 'f', -1, 64) + "%"
		if !slices.ContainsFunc(strings.Split(doc, "\n"), func(l string) bool {
			return strings.HasPrefix(l, "|") && strings.Contains(l, "`"+name+"`") && strings.Contains(l, want)
		}) {
			t.Errorf("%s: no SLO table row for `%s` with its objective %s", runbookPath, name, want)
		}
	}
	t.Logf("%s: a section for each of the %d alerts; external metrics allowed: %v", runbookPath, len(alerts), sortedKeys(externalMetrics))
}

// runbookSections maps each "### Rolloutd..." heading of docs/runbooks.md
// to its text.
func runbookSections(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	cur := ""
	for _, line := range strings.Split(string(readRepoFile(t, runbookPath)), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			cur = ""
			if strings.HasPrefix(h, "Rolloutd") {
				cur = strings.TrimSpace(h)
				out[cur] = ""
			}
			continue
		}
		if strings.HasPrefix(line, "## ") {
			cur = ""
		}
		if cur != "" {
			out[cur] += line + "\n"
		}
	}
	return out
}
