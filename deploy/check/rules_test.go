package check

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distribution/reference"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The names the rules look for: the rolloutd Deployment and its container.
const (
	appName       = "rolloutd"
	containerName = "rolloutd"

	wiClientIDAnnotation = "azure.workload.identity/client-id"
	wiUseLabel           = "azure.workload.identity/use"
)

// bundle is one rendered set of manifests, by kind.
type bundle struct {
	objects         []runtime.Object
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	serviceAccounts []*corev1.ServiceAccount
	secrets         []*corev1.Secret
	pdbs            []*policyv1.PodDisruptionBudget
	netpols         []*networkingv1.NetworkPolicy
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
}

func newBundle(objs []runtime.Object) *bundle {
	b := &bundle{objects: objs}
	for _, o := range objs {
		switch o := o.(type) {
		case *appsv1.Deployment:
			b.deployments = append(b.deployments, o)
		case *corev1.Service:
			b.services = append(b.services, o)
		case *corev1.ConfigMap:
			b.configMaps = append(b.configMaps, o)
		case *corev1.ServiceAccount:
			b.serviceAccounts = append(b.serviceAccounts, o)
		case *corev1.Secret:
			b.secrets = append(b.secrets, o)
		case *policyv1.PodDisruptionBudget:
			b.pdbs = append(b.pdbs, o)
		case *networkingv1.NetworkPolicy:
			b.netpols = append(b.netpols, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			b.hpas = append(b.hpas, o)
		}
	}
	return b
}

func namespaceOf(o runtime.Object) string {
	if m, ok := o.(metav1.Object); ok {
		return m.GetNamespace()
	}
	return ""
}

func describe(o runtime.Object) string {
	name := "?"
	if m, ok := o.(metav1.Object); ok {
		name = m.GetName()
	}
	return o.GetObjectKind().GroupVersionKind().Kind + "/" + name
}

func (b *bundle) deployment(name string) *appsv1.Deployment {
	for _, d := range b.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (b *bundle) configMap(name string) *corev1.ConfigMap {
	for _, c := range b.configMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func container(spec *corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	return nil
}

func allContainers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		out = append(out, &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		out = append(out, &spec.Containers[i])
	}
	return out
}

// flagValue finds a rolloutd setting the way rolloutd does: the flag in the
// container's args, then the ROLLOUTD_<FLAG> environment variable (a literal
// env entry, which Kubernetes lets override envFrom, then a ConfigMap named
// by envFrom). It reports where the value came from.
func (b *bundle) flagValue(c *corev1.Container, flag string) (value, source string, ok bool) {
	args := append(slices.Clone(c.Command), c.Args...)
	for i := len(args) - 1; i >= 0; i-- { // the last occurrence wins
		a := args[i]
		for _, prefix := range []string{"--" + flag, "-" + flag} {
			if v, found := strings.CutPrefix(a, prefix+"="); found {
				return v, "args", true
			}
			if a == prefix && i+1 < len(args) {
				return args[i+1], "args", true
			}
		}
	}
	env := "ROLLOUTD_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	if v, ok := b.envValue(c, env); ok {
		return v, "env " + env, true
	}
	return "", "", false
}

// envValue resolves an environment variable of the container from a literal
// env entry or a ConfigMap (envFrom or configMapKeyRef).
func (b *bundle) envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range slices.Backward(c.Env) {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil {
			return e.Value, true
		}
		if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
			if cm := b.configMap(ref.Name); cm != nil {
				v, ok := cm.Data[ref.Key]
				return v, ok
			}
		}
		return "", false
	}
	for _, ef := range slices.Backward(c.EnvFrom) {
		if ef.ConfigMapRef == nil {
			continue
		}
		if cm := b.configMap(ef.ConfigMapRef.Name); cm != nil {
			if v, ok := cm.Data[strings.TrimPrefix(name, ef.Prefix)]; ok && strings.HasPrefix(name, ef.Prefix) {
				return v, true
			}
		}
	}
	return "", false
}

// listenPort is the port of a host:port flag value such as ":50051".
func listenPort(v string) (int32, error) {
	_, p, err := net.SplitHostPort(v)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	return int32(n), err
}

// containerPort resolves a port (a number or a name) to one of the
// container's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString) (*corev1.ContainerPort, bool) {
	for i := range c.Ports {
		cp := &c.Ports[i]
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return nil, false
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// selects reports whether a label selector matches a pod template's labels.
func selects(sel *metav1.LabelSelector, podLabels map[string]string) (bool, error) {
	if sel == nil {
		return false, fmt.Errorf("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if s.Empty() {
		return false, fmt.Errorf("empty selector (selects every pod)")
	}
	return s.Matches(labels.Set(podLabels)), nil
}

// keyLike matches values that carry a storage key, a SAS, a private key or
// a long base64 secret.
var keyLike = regexp.MustCompile(`(?i)AccountKey=|SharedAccessSignature=|[?&;]sig=|-----BEGIN [A-Z ]*PRIVATE KEY|[A-Za-z0-9+/]{40,}={0,2}`)

// keyName matches variable names that say they hold a secret.
var keyName = regexp.MustCompile(`(?i)(KEY|SECRET|PASSWORD|PASSWD|TOKEN|CONNECTION_STRING|SAS|CREDENTIALS?)$`)

// problems checks the cross-field rules on a rendered bundle. prod adds the
// rules of an Azure deployment (workload identity only: no connection
// string, an https account URL).
func (b *bundle) problems(prod bool) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	// No Secret, and nothing key-like in env vars or ConfigMaps.
	for _, s := range b.secrets {
		add("Secret/%s: no Secret may be part of the manifests", s.Name)
	}
	for _, cm := range b.configMaps {
		for k, v := range cm.Data {
			if keyLike.MatchString(v) || (keyName.MatchString(k) && v != "") {
				add("ConfigMap/%s: %s looks like a key or credential", cm.Name, k)
			}
		}
		for k := range cm.BinaryData {
			add("ConfigMap/%s: binaryData %s is not allowed (it could hide a key)", cm.Name, k)
		}
	}

	for _, d := range b.deployments {
		out = append(out, b.deploymentProblems(d)...)
	}
	d := b.deployment(appName)
	if d == nil {
		return append(out, "no Deployment/"+appName)
	}
	out = append(out, b.rolloutdProblems(d, prod)...)

	// Every Service selects a Deployment's pods and targets their ports.
	for _, s := range b.services {
		matched := 0
		for _, dep := range b.deployments {
			if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) {
				continue
			}
			matched++
			for _, p := range s.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				found := false
				for _, c := range dep.Spec.Template.Spec.Containers {
					if cp, ok := containerPort(&c, target); ok && protocolOf(cp.Protocol) == protocolOf(p.Protocol) {
						found = true
					}
				}
				if !found {
					add("Service/%s: port %s targetPort %s matches no container port of Deployment/%s", s.Name, p.Name, target.String(), dep.Name)
				}
			}
		}
		if matched == 0 {
			add("Service/%s: selector %v matches no Deployment's pod template", s.Name, s.Spec.Selector)
		}
	}
	return out
}

// deploymentProblems holds the rules for every Deployment.
func (b *bundle) deploymentProblems(d *appsv1.Deployment) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("Deployment/%s: ", d.Name)+fmt.Sprintf(format, args...))
	}
	if ok, err := selects(d.Spec.Selector, d.Spec.Template.Labels); err != nil || !ok {
		add("selector %v does not match the template labels %v (%v)", d.Spec.Selector, d.Spec.Template.Labels, err)
	}
	spec := &d.Spec.Template.Spec
	pod := spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	for _, c := range allContainers(spec) {
		// Images: a tag or a digest, never :latest.
		ref, err := reference.ParseNormalizedNamed(c.Image)
		if err != nil {
			add("container %s: image %q: %v", c.Name, c.Image, err)
		} else {
			tagged, isTagged := ref.(reference.Tagged)
			_, isDigested := ref.(reference.Digested)
			switch {
			case !isTagged && !isDigested:
				add("container %s: image %q has no tag, which means :latest", c.Name, c.Image)
			case isTagged && tagged.Tag() == "latest":
				add("container %s: image %q is :latest", c.Name, c.Image)
			}
		}
		// Probes point at container ports.
		for kind, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
			if p == nil {
				continue
			}
			var port intstr.IntOrString
			switch {
			case p.GRPC != nil:
				port = intstr.FromInt32(p.GRPC.Port)
			case p.HTTPGet != nil:
				port = p.HTTPGet.Port
			case p.TCPSocket != nil:
				port = p.TCPSocket.Port
			default:
				continue
			}
			if _, ok := containerPort(c, port); !ok {
				add("container %s: %s port %s is not a container port", c.Name, kind, port.String())
			}
		}
		// Resources: requests and limits for CPU and memory.
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				add("container %s: no %s request", c.Name, r)
			}
			if _, ok := c.Resources.Limits[r]; !ok {
				add("container %s: no %s limit", c.Name, r)
			}
		}
		// Security context: non-root, read-only root, no capabilities, no
		// privilege escalation, RuntimeDefault seccomp.
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = pod.RunAsNonRoot
		}
		if nonRoot == nil || !*nonRoot {
			add("container %s: runAsNonRoot is not true", c.Name)
		}
		if uid := sc.RunAsUser; uid != nil && *uid == 0 || sc.RunAsUser == nil && pod.RunAsUser != nil && *pod.RunAsUser == 0 {
			add("container %s: runs as uid 0", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("container %s: privileged", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			add("container %s: capabilities must drop ALL and add none", c.Name)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			add("container %s: seccompProfile is not RuntimeDefault", c.Name)
		}
		// No key-like env vars: a secret may only be referenced (the dev
		// overlay's Azurite connection string), never written.
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				continue
			}
			if keyLike.MatchString(e.Value) || (keyName.MatchString(e.Name) && e.Value != "") {
				add("container %s: env %s looks like a key or credential", c.Name, e.Name)
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				add("container %s: envFrom Secret %s: reference single keys with secretKeyRef instead", c.Name, ef.SecretRef.Name)
			}
			if ef.ConfigMapRef != nil && b.configMap(ef.ConfigMapRef.Name) == nil {
				add("container %s: envFrom names ConfigMap %s, which is not in the manifests", c.Name, ef.ConfigMapRef.Name)
			}
		}
	}
	return out
}

// rolloutdProblems holds the rules for rolloutd's own Deployment.
func (b *bundle) rolloutdProblems(d *appsv1.Deployment, prod bool) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("Deployment/%s: ", d.Name)+fmt.Sprintf(format, args...))
	}
	tmpl := d.Spec.Template
	spec := &tmpl.Spec
	c := container(spec, containerName)
	if c == nil {
		return append(out, "Deployment/rolloutd: no container "+containerName)
	}

	// Ports: --listen and --metrics-listen are container ports.
	ports := map[string]int32{}
	for flag, name := range map[string]string{"listen": "grpc", "metrics-listen": "metrics"} {
		v, _, ok := b.flagValue(c, flag)
		if !ok {
			add("--%s is not set in the args or the ConfigMap", flag)
			continue
		}
		p, err := listenPort(v)
		if err != nil {
			add("--%s=%q: %v", flag, v, err)
			continue
		}
		cp, ok := containerPort(c, intstr.FromString(name))
		if !ok || cp.ContainerPort != p {
			add("--%s=%s but the container port named %q is %v", flag, v, name, cp)
			continue
		}
		ports[name] = p
	}

	// Probes: readiness and liveness on the standard gRPC health service.
	for kind, p := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		switch {
		case p == nil:
			add("no %s", kind)
		case p.GRPC == nil:
			add("%s is not a gRPC health probe", kind)
		case p.GRPC.Port != ports["grpc"]:
			add("%s checks port %d, not the gRPC port %d", kind, p.GRPC.Port, ports["grpc"])
		case p.GRPC.Service != nil && *p.GRPC.Service != "":
			add("%s asks for service %q; rolloutd reports the server's health under \"\"", kind, *p.GRPC.Service)
		}
	}

	// Shutdown: the grace period exceeds --shutdown-timeout, which includes
	// --drain-delay.
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	st, src, ok := b.flagValue(c, "shutdown-timeout")
	if !ok {
		add("--shutdown-timeout is set neither in the args nor in the ConfigMap; the grace period must be checked against it")
	} else if timeout, err := time.ParseDuration(st); err != nil {
		add("--shutdown-timeout=%q (from %s): %v", st, src, err)
	} else {
		if time.Duration(grace)*time.Second <= timeout {
			add("terminationGracePeriodSeconds %d does not exceed --shutdown-timeout=%s (from %s)", grace, st, src)
		}
		if dd, _, ok := b.flagValue(c, "drain-delay"); ok {
			// rolloutd itself refuses a drain delay of half the budget or more.
			if delay, err := time.ParseDuration(dd); err != nil || delay >= timeout/2 {
				add("--drain-delay=%s must be under half of --shutdown-timeout=%s (which includes it)", dd, st)
			}
		}
	}

	// rolloutd reports NOT_SERVING for its whole shutdown; a liveness probe
	// that gives up sooner would kill a pod that is still closing writers.
	if p := c.LivenessProbe; p != nil {
		window := int64(max(p.PeriodSeconds, 10)) * int64(max(p.FailureThreshold, 3))
		if window <= grace {
			add("the liveness probe gives up after %ds, within terminationGracePeriodSeconds %d: it could kill a pod while it shuts down", window, grace)
		}
	}

	// No service links: Kubernetes would set ROLLOUTD_SERVICE_HOST,
	// ROLLOUTD_PORT_... for the Service named rolloutd, in the namespace
	// of the variables rolloutd reads as settings.
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		add("enableServiceLinks is not false: Kubernetes would inject ROLLOUTD_SERVICE_HOST and ROLLOUTD_PORT_* beside rolloutd's ROLLOUTD_* settings")
	}

	// GOMEMLIMIT, if set, must leave room under the memory limit.
	if v, ok := b.envValue(c, "GOMEMLIMIT"); ok {
		limit, hasLimit := c.Resources.Limits[corev1.ResourceMemory]
		soft, err := parseGoMemLimit(v)
		switch {
		case err != nil:
			add("GOMEMLIMIT=%q: %v", v, err)
		case hasLimit && soft >= limit.Value():
			add("GOMEMLIMIT=%s is not below the memory limit %s", v, limit.String())
		}
	}

	// Workload identity: the service account's client-id annotation and
	// the pod label.
	if tmpl.Labels[wiUseLabel] != "true" {
		add("the pod template lacks the label %s: \"true\"", wiUseLabel)
	}
	var sa *corev1.ServiceAccount
	for _, s := range b.serviceAccounts {
		if s.Name == spec.ServiceAccountName {
			sa = s
		}
	}
	switch {
	case spec.ServiceAccountName == "" || spec.ServiceAccountName == "default":
		add("runs as the default service account; workload identity needs its own")
	case sa == nil:
		add("ServiceAccount %s is not in the manifests", spec.ServiceAccountName)
	case !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(sa.Annotations[wiClientIDAnnotation]):
		add("ServiceAccount/%s: annotation %s=%q is not a client id (a UUID)", sa.Name, wiClientIDAnnotation, sa.Annotations[wiClientIDAnnotation])
	}

	// Azure: workload identity only, no connection string.
	store, _, _ := b.flagValue(c, "store")
	if !strings.HasPrefix(store, "azblob://") {
		add("--store=%q is not an azblob:// URL", store)
	}
	if prod {
		if _, ok := b.envValue(c, "AZURE_STORAGE_CONNECTION_STRING"); ok || slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "AZURE_STORAGE_CONNECTION_STRING" }) {
			add("sets AZURE_STORAGE_CONNECTION_STRING; on AKS rolloutd authenticates with workload identity")
		}
		u, ok := b.envValue(c, "AZURE_STORAGE_ACCOUNT_URL")
		if v, _, fok := b.flagValue(c, "azure-account-url"); fok {
			u, ok = v, true
		}
		if !ok || !regexp.MustCompile(`^https://[a-z0-9]{3,24}\.blob\.core\.windows\.net/?$`).MatchString(u) {
			add("the account URL %q is not https://ACCOUNT.blob.core.windows.net/", u)
		}
	}

	// Topology spread across zones and nodes, over rolloutd's own pods.
	for _, key := range []string{"topology.kubernetes.io/zone", "kubernetes.io/hostname"} {
		found := false
		for _, tsc := range spec.TopologySpreadConstraints {
			if tsc.TopologyKey != key {
				continue
			}
			if ok, err := selects(tsc.LabelSelector, tmpl.Labels); err != nil || !ok {
				add("topology spread on %s: its selector does not match the template labels", key)
			}
			found = true
		}
		if !found {
			add("no topology spread constraint on %s", key)
		}
	}

	// Prometheus scrape annotations point at the metrics port.
	ann := tmpl.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(int(ports["metrics"])) || ann["prometheus.io/path"] != "/metrics" {
		add("prometheus.io annotations %v do not scrape /metrics on the metrics port %d", ann, ports["metrics"])
	}

	// Services: a ClusterIP one for gRPC and metrics, and a headless one for
	// gRPC.
	var clusterIP, headless bool
	for _, s := range b.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(tmpl.Labels)) || len(s.Spec.Selector) == 0 {
			continue
		}
		has := func(name string) bool {
			for _, p := range s.Spec.Ports {
				if cp, ok := containerPort(c, p.TargetPort); ok && cp.Name == name {
					return true
				}
			}
			return false
		}
		switch {
		case s.Spec.ClusterIP == corev1.ClusterIPNone:
			headless = headless || has("grpc")
		case s.Spec.Type == "" || s.Spec.Type == corev1.ServiceTypeClusterIP:
			clusterIP = clusterIP || (has("grpc") && has("metrics"))
		}
	}
	if !clusterIP {
		add("no ClusterIP Service exposes both the grpc and the metrics port")
	}
	if !headless {
		add("no headless Service exposes the grpc port")
	}

	// PodDisruptionBudget.
	pdbOK := false
	for _, p := range b.pdbs {
		if ok, _ := selects(p.Spec.Selector, tmpl.Labels); ok {
			pdbOK = true
		}
	}
	if !pdbOK {
		add("no PodDisruptionBudget selects its pods")
	}

	// HorizontalPodAutoscaler on CPU, which needs a CPU request.
	hpaOK := false
	for _, h := range b.hpas {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
			continue
		}
		for _, m := range h.Spec.Metrics {
			if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU {
				hpaOK = true
			}
		}
	}
	if !hpaOK {
		add("no HorizontalPodAutoscaler scales it on CPU")
	}

	// NetworkPolicy: gRPC only from labelled clients, metrics only from the
	// monitoring namespace.
	out = append(out, b.networkPolicyProblems(d, ports)...)
	return out
}

func (b *bundle) networkPolicyProblems(d *appsv1.Deployment, ports map[string]int32) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	var np *networkingv1.NetworkPolicy
	for _, p := range b.netpols {
		if ok, _ := selects(&p.Spec.PodSelector, d.Spec.Template.Labels); ok {
			np = p
		}
	}
	if np == nil {
		return []string{"no NetworkPolicy selects rolloutd's pods"}
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		add("NetworkPolicy/%s: policyTypes lacks Ingress", np.Name)
	}
	c := container(&d.Spec.Template.Spec, containerName)
	covered := map[string]bool{}
	for i, rule := range np.Spec.Ingress {
		if len(rule.From) == 0 {
			add("NetworkPolicy/%s: ingress rule %d admits every source", np.Name, i)
		}
		if len(rule.Ports) == 0 {
			add("NetworkPolicy/%s: ingress rule %d opens every port", np.Name, i)
		}
		for _, p := range rule.Ports {
			if p.Port == nil {
				add("NetworkPolicy/%s: ingress rule %d has a port entry without a port", np.Name, i)
				continue
			}
			cp, ok := containerPort(c, *p.Port)
			if !ok {
				add("NetworkPolicy/%s: ingress rule %d port %s is not a container port", np.Name, i, p.Port.String())
				continue
			}
			covered[cp.Name] = true
			for _, peer := range rule.From {
				switch cp.Name {
				case "grpc":
					if peer.IPBlock != nil || peer.PodSelector == nil || len(peer.PodSelector.MatchLabels)+len(peer.PodSelector.MatchExpressions) == 0 {
						add("NetworkPolicy/%s: the gRPC port admits a peer that is not a labelled client pod", np.Name)
					}
				case "metrics":
					if peer.IPBlock != nil || peer.PodSelector != nil && len(peer.PodSelector.MatchLabels) > 0 ||
						peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
						add("NetworkPolicy/%s: the metrics port admits a peer outside the monitoring namespace", np.Name)
					}
				default:
					add("NetworkPolicy/%s: opens port %s, which is neither grpc nor metrics", np.Name, cp.Name)
				}
			}
		}
	}
	for _, name := range []string{"grpc", "metrics"} {
		if !covered[name] {
			add("NetworkPolicy/%s: no ingress rule for the %s port %d", np.Name, name, ports[name])
		}
	}
	return out
}

// parseGoMemLimit parses a GOMEMLIMIT value as the Go runtime does: a byte
// count with an optional B, KiB, MiB, GiB or TiB suffix.
func parseGoMemLimit(v string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = rest, u.size
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("not a byte count with an optional B/KiB/MiB/GiB/TiB suffix")
	}
	return n * mult, nil
}
