package check

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestPodMonitorScrapesTheServer renders overlays/aks with the monitoring
// component and checks that its PodMonitor scrapes the server the way the
// alerts expect: the pods it selects are the Deployment's, the job label it
// gives them is the alerts' scrapeJob, and port, path, scheme and CA are
// those the Deployment serves metrics with. A PodMonitor that selects no
// pod would leave every alert but RolloutdTargetAbsent silent.
func TestPodMonitorScrapesTheServer(t *testing.T) {
	_, b := renderAKSWith(t, "components/monitoring")
	pm := onePodMonitor(t, b)
	for _, p := range podMonitorProblems(pm, b) {
		t.Error(p)
	}
}

// The check fires on each way a PodMonitor can miss the server.
func TestPodMonitorChecksFire(t *testing.T) {
	_, b := renderAKSWith(t, "components/monitoring")
	for name, breakIt := range map[string]func(pm *monitoringv1.PodMonitor){
		"job label": func(pm *monitoringv1.PodMonitor) { pm.Spec.JobLabel = "app.kubernetes.io/component" },
		"selector":  func(pm *monitoringv1.PodMonitor) { pm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "rollout" },
		"port":      func(pm *monitoringv1.PodMonitor) { pm.Spec.PodMetricsEndpoints[0].Port = ptr("grpc") },
		"scheme": func(pm *monitoringv1.PodMonitor) {
			pm.Spec.PodMetricsEndpoints[0].Scheme = ptr(monitoringv1.Scheme("http"))
		},
		"CA secret": func(pm *monitoringv1.PodMonitor) {
			pm.Spec.PodMetricsEndpoints[0].TLSConfig.CA.Secret.Name = "rolloutd-tls"
		},
		"no endpoint": func(pm *monitoringv1.PodMonitor) { pm.Spec.PodMetricsEndpoints = nil },
		"path":        func(pm *monitoringv1.PodMonitor) { pm.Spec.PodMetricsEndpoints[0].Path = "/metric" },
		"server name": func(pm *monitoringv1.PodMonitor) {
			pm.Spec.PodMetricsEndpoints[0].TLSConfig.ServerName = ptr("rolloutd")
		},
		"no TLS config": func(pm *monitoringv1.PodMonitor) { pm.Spec.PodMetricsEndpoints[0].TLSConfig = nil },
	} {
		pm := onePodMonitor(t, b).DeepCopy()
		breakIt(pm)
		if len(podMonitorProblems(pm, b)) == 0 {
			t.Errorf("%s: a broken PodMonitor passed", name)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func onePodMonitor(t *testing.T, b *bundle) *monitoringv1.PodMonitor {
	t.Helper()
	var pms []*monitoringv1.PodMonitor
	for _, o := range b.objects {
		if pm, ok := o.(*monitoringv1.PodMonitor); ok {
			pms = append(pms, pm)
		}
	}
	if len(pms) != 1 {
		t.Fatalf("overlays/aks with components/monitoring renders %d PodMonitors, want 1", len(pms))
	}
	if pms[0].Namespace != "rolloutd" {
		t.Errorf("PodMonitor/%s is in namespace %q, want rolloutd", pms[0].Name, pms[0].Namespace)
	}
	return pms[0]
}

// podMonitorProblems compares a PodMonitor with the server Deployment of b.
func podMonitorProblems(pm *monitoringv1.PodMonitor, b *bundle) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d := b.deployment(appName)
	if d == nil {
		return []string{"no Deployment/" + appName}
	}
	pod := d.Spec.Template
	sel, err := labels.ValidatedSelectorFromSet(pm.Spec.Selector.MatchLabels)
	if err != nil || len(pm.Spec.Selector.MatchExpressions) > 0 {
		add("PodMonitor selector: want plain matchLabels (%v)", err)
	} else if !sel.Matches(labels.Set(pod.Labels)) {
		add("PodMonitor selects %v, which the server's pods (%v) do not carry", pm.Spec.Selector.MatchLabels, pod.Labels)
	}
	if job := pod.Labels[pm.Spec.JobLabel]; job != scrapeJob {
		add("PodMonitor jobLabel %q gives the job %q; the alerts select job=%q", pm.Spec.JobLabel, job, scrapeJob)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		return append(problems, fmt.Sprintf("PodMonitor has %d endpoints, want 1", len(pm.Spec.PodMetricsEndpoints)))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	ann := pod.Annotations
	c := container(&pod.Spec, containerName)
	if c == nil {
		return append(problems, "no container "+containerName)
	}
	port := ""
	if ep.Port != nil {
		port = *ep.Port
	}
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port })
	if i < 0 || strconv.Itoa(int(c.Ports[i].ContainerPort)) != ann["prometheus.io/port"] {
		add("PodMonitor scrapes port %q; the metrics port is %s", port, ann["prometheus.io/port"])
	}
	if path := ep.Path; path != ann["prometheus.io/path"] {
		add("PodMonitor scrapes path %q; metrics are at %q", path, ann["prometheus.io/path"])
	}
	scheme := ""
	if ep.Scheme != nil {
		scheme = string(*ep.Scheme)
	}
	if scheme != ann["prometheus.io/scheme"] {
		add("PodMonitor scheme %q; the server serves metrics over %q", scheme, ann["prometheus.io/scheme"])
	}
	if scheme != "https" {
		return problems
	}
	tc := ep.TLSConfig
	if tc == nil || tc.CA.Secret == nil {
		return append(problems, "PodMonitor scrapes https with no CA from a Secret")
	}
	if !podMountsSecret(&pod.Spec, tc.CA.Secret.Name) {
		add("PodMonitor trusts the CA of Secret %q, which the server does not mount", tc.CA.Secret.Name)
	}
	if sn := deref(tc.ServerName); sn != serverDNSName {
		add("PodMonitor serverName %q; the server's certificate names %q", sn, serverDNSName)
	}
	return problems
}

// serverDNSName is the name the server's certificate (overlays/mtls) and
// its clients use.
const serverDNSName = appName + ".rolloutd.svc"

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// podMountsSecret reports whether spec mounts the Secret name as a volume,
// directly or in a projected volume.
func podMountsSecret(spec *corev1.PodSpec, name string) bool {
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == name {
			return true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && src.Secret.Name == name {
					return true
				}
			}
		}
	}
	return false
}
