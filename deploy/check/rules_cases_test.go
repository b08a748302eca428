package check

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRenderedManifestsPassTheRules runs the cross-field rules on the
// rendered base (an AKS deployment) and the dev overlay (Azurite).
func TestRenderedManifestsPassTheRules(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		prod bool
	}{{"base", true}, {"overlays/dev", false}} {
		t.Run(tc.dir, func(t *testing.T) {
			_, b := renderOnDisk(t, tc.dir)
			for _, p := range b.problems(tc.prod) {
				t.Error(p)
			}
			d := b.deployment(appName)
			c := container(&d.Spec.Template.Spec, containerName)
			st, src, _ := b.flagValue(c, "shutdown-timeout")
			t.Logf("%s: image %s; grace %ds > --shutdown-timeout=%s (from %s); store %s",
				tc.dir, c.Image, *d.Spec.Template.Spec.TerminationGracePeriodSeconds, st, src, must(b.flagValue(c, "store")))
		})
	}
}

func must(v, _ string, _ bool) string { return v }

// TestRulesCatchBrokenManifests breaks one thing at a time in a fresh copy
// of the rendered base and requires the matching rule to report it, so that
// no rule passes vacuously.
func TestRulesCatchBrokenManifests(t *testing.T) {
	rendered, _ := renderOnDisk(t, "base")
	rolloutd := func(b *bundle) *corev1.Container {
		return container(&b.deployment(appName).Spec.Template.Spec, containerName)
	}
	for _, tc := range []struct {
		name   string
		mutate func(b *bundle)
		want   string
	}{
		{"template label drifts from the selector", func(b *bundle) {
			b.deployment(appName).Spec.Template.Labels["app.kubernetes.io/component"] = "worker"
		}, "does not match the template labels"},
		{"readiness probe on a port the container lacks", func(b *bundle) {
			rolloutd(b).ReadinessProbe.GRPC.Port = 50052
		}, "readinessProbe port 50052 is not a container port"},
		{"liveness probe over HTTP", func(b *bundle) {
			rolloutd(b).LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("metrics")}}}
		}, "livenessProbe is not a gRPC health probe"},
		{"Service targets a missing port", func(b *bundle) {
			b.services[0].Spec.Ports[0].TargetPort = intstr.FromString("grcp")
		}, "matches no container port"},
		{"--listen differs from the grpc container port", func(b *bundle) {
			c := rolloutd(b)
			c.Args = append(c.Args, "--listen=:6000")
		}, "--listen=:6000 but the container port"},
		{"grace period equal to --shutdown-timeout", func(b *bundle) {
			g := int64(30)
			b.deployment(appName).Spec.Template.Spec.TerminationGracePeriodSeconds = &g
		}, "terminationGracePeriodSeconds 30 does not exceed --shutdown-timeout=30s (from args)"},
		{"--shutdown-timeout from the ConfigMap exceeds the grace period", func(b *bundle) {
			c := rolloutd(b)
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--shutdown-timeout") })
			b.configMap("rolloutd-config").Data["ROLLOUTD_SHUTDOWN_TIMEOUT"] = "60s"
		}, "does not exceed --shutdown-timeout=60s (from env ROLLOUTD_SHUTDOWN_TIMEOUT)"},
		{"--shutdown-timeout set nowhere", func(b *bundle) {
			c := rolloutd(b)
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--shutdown-timeout") })
		}, "--shutdown-timeout is set neither"},
		{"image :latest", func(b *bundle) {
			rolloutd(b).Image = "rolloutd.azurecr.io/rolloutd:latest"
		}, "is :latest"},
		{"image without a tag", func(b *bundle) {
			rolloutd(b).Image = "rolloutd.azurecr.io/rolloutd"
		}, "has no tag"},
		{"no workload identity label", func(b *bundle) {
			delete(b.deployment(appName).Spec.Template.Labels, wiUseLabel)
		}, "lacks the label azure.workload.identity/use"},
		{"no client-id annotation", func(b *bundle) {
			delete(b.serviceAccounts[0].Annotations, wiClientIDAnnotation)
		}, "is not a client id"},
		{"a Secret", func(b *bundle) {
			b.secrets = append(b.secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "storage"}})
		}, "Secret/storage: no Secret"},
		{"an account key in an env var", func(b *bundle) {
			c := rolloutd(b)
			c.Env = append(c.Env, corev1.EnvVar{Name: "AZURE_STORAGE_KEY", Value: "abc"})
		}, "env AZURE_STORAGE_KEY looks like a key"},
		{"a connection string in the ConfigMap", func(b *bundle) {
			b.configMap("rolloutd-config").Data["STORAGE"] = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=eHl6;"
		}, "ConfigMap/rolloutd-config: STORAGE looks like a key"},
		{"a connection string on AKS, even from a Secret", func(b *bundle) {
			c := rolloutd(b)
			c.Env = append(c.Env, corev1.EnvVar{Name: "AZURE_STORAGE_CONNECTION_STRING", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}})
		}, "sets AZURE_STORAGE_CONNECTION_STRING"},
		{"writable root filesystem", func(b *bundle) {
			f := false
			rolloutd(b).SecurityContext.ReadOnlyRootFilesystem = &f
		}, "readOnlyRootFilesystem is not true"},
		{"a capability kept", func(b *bundle) {
			rolloutd(b).SecurityContext.Capabilities.Drop = []corev1.Capability{"NET_RAW"}
		}, "capabilities must drop ALL"},
		{"no memory limit", func(b *bundle) {
			delete(rolloutd(b).Resources.Limits, corev1.ResourceMemory)
		}, "no memory limit"},
		{"no zone spread", func(b *bundle) {
			b.deployment(appName).Spec.Template.Spec.TopologySpreadConstraints = b.deployment(appName).Spec.Template.Spec.TopologySpreadConstraints[1:]
		}, "no topology spread constraint on topology.kubernetes.io/zone"},
		{"scrape annotation on the wrong port", func(b *bundle) {
			b.deployment(appName).Spec.Template.Annotations["prometheus.io/port"] = "50051"
		}, "do not scrape /metrics on the metrics port 9090"},
		{"no headless Service", func(b *bundle) {
			b.services = slices.DeleteFunc(b.services, func(s *corev1.Service) bool { return s.Spec.ClusterIP == corev1.ClusterIPNone })
		}, "no headless Service"},
		{"gRPC open to every pod", func(b *bundle) {
			b.netpols[0].Spec.Ingress[0].From[0].PodSelector = nil
		}, "the gRPC port admits a peer that is not a labelled client pod"},
		{"metrics open to every namespace", func(b *bundle) {
			b.netpols[0].Spec.Ingress[1].From[0].NamespaceSelector.MatchLabels = nil
		}, "the metrics port admits a peer outside the monitoring namespace"},
		{"HPA on memory", func(b *bundle) {
			b.hpas[0].Spec.Metrics[0].Resource.Name = corev1.ResourceMemory
		}, "no HorizontalPodAutoscaler scales it on CPU"},
		{"liveness gives up during shutdown", func(b *bundle) {
			rolloutd(b).LivenessProbe.FailureThreshold = 3
		}, "the liveness probe gives up after 30s"},
		{"GOMEMLIMIT above the memory limit", func(b *bundle) {
			rolloutd(b).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}, "GOMEMLIMIT=1800MiB is not below the memory limit 1Gi"},
		{"PDB selects other pods", func(b *bundle) {
			b.pdbs[0].Spec.Selector.MatchLabels["app.kubernetes.io/name"] = "other"
		}, "no PodDisruptionBudget selects its pods"},
		{"service links on", func(b *bundle) {
			b.deployment(appName).Spec.Template.Spec.EnableServiceLinks = nil
		}, "enableServiceLinks is not false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := decodeManifests(rendered)
			if err != nil {
				t.Fatal(err)
			}
			b := newBundle(objs)
			tc.mutate(b)
			got := b.problems(true)
			for _, p := range got {
				if strings.Contains(p, tc.want) {
					t.Logf("caught: %s", p)
					return
				}
			}
			t.Errorf("no problem containing %q; got %q", tc.want, got)
		})
	}
}
