package check

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// The kinds of the spiffe component beyond k8s.io/api: cert-manager's
// ClusterIssuer (the Issuer's spec), and approver-policy's
// CertificateRequestPolicy (policy.cert-manager.io/v1alpha1). The module
// does not depend on approver-policy, so this is a local transcription of
// the fields of its API reference; registered in the strict scheme, an
// unknown or misspelled field fails to decode (DisallowUnknownFields), as
// in a Deployment. Plugins are accepted as raw JSON.
var approverPolicyV1alpha1 = schema.GroupVersion{Group: "policy.cert-manager.io", Version: "v1alpha1"}

func init() {
	utilruntime.Must(rbacv1.AddToScheme(scheme))
	scheme.AddKnownTypeWithName(certManagerV1.WithKind("ClusterIssuer"), &cmClusterIssuer{})
	scheme.AddKnownTypeWithName(approverPolicyV1alpha1.WithKind("CertificateRequestPolicy"), &crPolicy{})
}

type cmClusterIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cmIssuerSpec `json:"spec"`
}

func (i *cmClusterIssuer) DeepCopyObject() runtime.Object {
	return deepCopyJSON(i, &cmClusterIssuer{})
}

type crPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              crPolicySpec `json:"spec"`
}

func (p *crPolicy) DeepCopyObject() runtime.Object { return deepCopyJSON(p, &crPolicy{}) }

type crPolicySpec struct {
	Allowed     *crPolicyAllowed                 `json:"allowed,omitempty"`
	Constraints *crPolicyConstraints             `json:"constraints,omitempty"`
	Plugins     map[string]*runtime.RawExtension `json:"plugins,omitempty"`
	Selector    crPolicySelector                 `json:"selector"`
}

type crPolicyAllowed struct {
	CommonName     *crPolicyString       `json:"commonName,omitempty"`
	DNSNames       *crPolicyStringList   `json:"dnsNames,omitempty"`
	IPAddresses    *crPolicyStringList   `json:"ipAddresses,omitempty"`
	URIs           *crPolicyStringList   `json:"uris,omitempty"`
	EmailAddresses *crPolicyStringList   `json:"emailAddresses,omitempty"`
	IsCA           *bool                 `json:"isCA,omitempty"`
	Usages         []string              `json:"usages,omitempty"`
	Subject        *runtime.RawExtension `json:"subject,omitempty"`
}

type crPolicyString struct {
	Value       string               `json:"value,omitempty"`
	Required    *bool                `json:"required,omitempty"`
	Validations []crPolicyValidation `json:"validations,omitempty"`
}

type crPolicyStringList struct {
	Values      []string             `json:"values,omitempty"`
	Required    *bool                `json:"required,omitempty"`
	Validations []crPolicyValidation `json:"validations,omitempty"`
}

type crPolicyValidation struct {
	Rule    string `json:"rule"`
	Message string `json:"message,omitempty"`
}

type crPolicyConstraints struct {
	MinDuration *metav1.Duration `json:"minDuration,omitempty"`
	MaxDuration *metav1.Duration `json:"maxDuration,omitempty"`
	PrivateKey  *struct {
		Algorithm string `json:"algorithm,omitempty"`
		MinSize   *int   `json:"minSize,omitempty"`
		MaxSize   *int   `json:"maxSize,omitempty"`
	} `json:"privateKey,omitempty"`
}

type crPolicySelector struct {
	IssuerRef *cmIssuerReference `json:"issuerRef,omitempty"`
	Namespace *struct {
		MatchNames  []string          `json:"matchNames,omitempty"`
		MatchLabels map[string]string `json:"matchLabels,omitempty"`
	} `json:"namespace,omitempty"`
}

// The csi-driver-spiffe settings operations.md installs it with; the SPIFFE
// IDs it issues are spiffe://<trustDomain>/ns/<namespace>/sa/<service
// account> (its approver compares exactly that string with the requester).
const (
	spiffeDriver      = "spiffe.csi.cert-manager.io"
	spiffeTrustDomain = "cluster.local"
	spiffeIssuer      = "rolloutd-spiffe"
)

// spiffeID is the identity csi-driver-spiffe gives a pod of a service
// account.
func spiffeID(namespace, sa string) string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", spiffeTrustDomain, namespace, sa)
}

// spiffeVolume returns the pod's csi-driver-spiffe volume and where the
// container mounts it.
func spiffeVolume(spec *corev1.PodSpec, c *corev1.Container) (*corev1.Volume, string) {
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.CSI == nil || v.CSI.Driver != spiffeDriver {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				return v, m.MountPath
			}
		}
	}
	return nil, ""
}

// canCreateRequests reports whether a Role bound to the service account in
// its namespace lets it create cert-manager CertificateRequests, which the
// driver does with the pod's own token.
func canCreateRequests(objs []runtime.Object, namespace, sa string) bool {
	roles := map[string]*rbacv1.Role{}
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok && r.Namespace == namespace {
			roles[r.Name] = r
		}
	}
	for _, o := range objs {
		rb, ok := o.(*rbacv1.RoleBinding)
		if !ok || rb.Namespace != namespace || rb.RoleRef.Kind != "Role" || roles[rb.RoleRef.Name] == nil {
			continue
		}
		bound := slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == "ServiceAccount" && s.Name == sa && (s.Namespace == "" || s.Namespace == namespace)
		})
		for _, r := range roles[rb.RoleRef.Name].Rules {
			if bound && slices.Contains(r.APIGroups, "cert-manager.io") && slices.Contains(r.Resources, "certificaterequests") && slices.Contains(r.Verbs, "create") {
				return true
			}
		}
	}
	return false
}

// policyGrants returns the identities the rendered policy.json grants.
func policyGrants(t *testing.T, b *bundle) []string {
	t.Helper()
	cm := b.configMap("rolloutd-authz")
	if cm == nil {
		t.Fatal("no ConfigMap rolloutd-authz")
	}
	var policy struct {
		Grants []struct{ Identities []string }
	}
	if err := json.Unmarshal([]byte(cm.Data["policy.json"]), &policy); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range policy.Grants {
		ids = append(ids, g.Identities...)
	}
	return ids
}

// wildcardMatch matches approver-policy's patterns, where * matches any
// run of characters.
func wildcardMatch(pattern, s string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, ".*") + "$"
	return regexp.MustCompile(re).MatchString(s)
}

// spiffeProblems checks overlays/aks with the spiffe component (and purge).
func spiffeProblems(objs []runtime.Object) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	b := newBundle(objs)
	certs := map[string]*cmCertificate{}
	issuers := map[string]*cmIssuer{}
	clusterIssuers := map[string]*cmClusterIssuer{}
	var policies []*crPolicy
	for _, o := range objs {
		switch o := o.(type) {
		case *cmCertificate:
			certs[o.Namespace+"/"+o.Name] = o
		case *cmIssuer:
			issuers[o.Namespace+"/"+o.Name] = o
		case *cmClusterIssuer:
			clusterIssuers[o.Name] = o
		case *crPolicy:
			policies = append(policies, o)
		case *rbacv1.ClusterRoleBinding:
			add("ClusterRoleBinding/%s: a policy bound cluster-wide applies in every namespace", o.Name)
		}
	}

	// One root: the SVIDs' ClusterIssuer and the intermediate's are CA
	// issuers over the root's Secret, in cert-manager's namespace.
	svid := clusterIssuers[spiffeIssuer]
	if svid == nil || svid.Spec.CA == nil {
		return append(out, "no CA ClusterIssuer "+spiffeIssuer)
	}
	root := certs["cert-manager/"+svid.Spec.CA.SecretName]
	if root == nil || !root.Spec.IsCA || root.Spec.SecretName != svid.Spec.CA.SecretName {
		add("ClusterIssuer/%s: its Secret %s is not a CA Certificate in namespace cert-manager", svid.Name, svid.Spec.CA.SecretName)
	}
	inter := certs["rolloutd/rolloutd-ca"]
	if inter == nil || !inter.Spec.IsCA || inter.Spec.IssuerRef.Kind != "ClusterIssuer" || clusterIssuers[inter.Spec.IssuerRef.Name] == nil ||
		clusterIssuers[inter.Spec.IssuerRef.Name].Spec.CA == nil || clusterIssuers[inter.Spec.IssuerRef.Name].Spec.CA.SecretName != svid.Spec.CA.SecretName {
		add("Certificate/rolloutd-ca is not an intermediate signed by the root of %s, so the server and purge certificates would not chain to the SVIDs' root", spiffeIssuer)
	}
	for _, gone := range []string{"rolloutd/rolloutd-client-team-a-trainer"} {
		if certs[gone] != nil {
			add("Certificate %s (another namespace's identity, minted in rolloutd) is still there", gone)
		}
	}
	if issuers["rolloutd/rolloutd-selfsigned"] != nil {
		add("Issuer rolloutd-selfsigned is still there: a second root")
	}

	// The server trusts the root from its own spiffe volume.
	d := b.deployment(appName)
	if d == nil {
		return append(out, "no Deployment/rolloutd")
	}
	spec := &d.Spec.Template.Spec
	c := container(spec, containerName)
	vol, mount := spiffeVolume(spec, c)
	if vol == nil {
		add("the server mounts no %s volume", spiffeDriver)
	} else {
		if v, _, _ := b.flagValue(c, "tls-client-ca"); v != mount+"/ca.crt" {
			add("--tls-client-ca=%s, want the root from the spiffe volume, %s/ca.crt", v, mount)
		}
		if spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil || vol.CSI.VolumeAttributes["spiffe.csi.cert-manager.io/fs-group"] != fmt.Sprint(*spec.SecurityContext.FSGroup) {
			add("the server's spiffe volume is not readable by its fsGroup")
		}
	}
	if !canCreateRequests(objs, d.Namespace, spec.ServiceAccountName) {
		add("ServiceAccount %s may not create CertificateRequests in %s: the driver cannot request its volume", spec.ServiceAccountName, d.Namespace)
	}

	// No policy selects the SVIDs' issuer (two approvers would race); every
	// Certificate is allowed by a policy that selects its issuer and is bound
	// in its namespace to cert-manager.
	bound := map[string][]string{} // namespace -> policy names cert-manager may use there
	clusterRoles := map[string]*rbacv1.ClusterRole{}
	for _, o := range objs {
		if cr, ok := o.(*rbacv1.ClusterRole); ok {
			clusterRoles[cr.Name] = cr
		}
	}
	for _, o := range objs {
		rb, ok := o.(*rbacv1.RoleBinding)
		if !ok || rb.RoleRef.Kind != "ClusterRole" || clusterRoles[rb.RoleRef.Name] == nil ||
			!slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool { return s.Name == "cert-manager" && s.Namespace == "cert-manager" }) {
			continue
		}
		for _, r := range clusterRoles[rb.RoleRef.Name].Rules {
			if slices.Contains(r.Resources, "certificaterequestpolicies") && slices.Contains(r.Verbs, "use") {
				bound[rb.Namespace] = append(bound[rb.Namespace], r.ResourceNames...)
			}
		}
	}
	for _, p := range policies {
		ref := p.Spec.Selector.IssuerRef
		if ref == nil || (wildcardMatch(ref.Name, spiffeIssuer) && wildcardMatch(ref.Kind, "ClusterIssuer")) {
			add("CertificateRequestPolicy/%s selects the SVIDs' issuer %s, whose approver is csi-driver-spiffe's", p.Name, spiffeIssuer)
		}
	}
	for key, cert := range certs {
		if !slices.ContainsFunc(policies, func(p *crPolicy) bool {
			return slices.Contains(bound[cert.Namespace], p.Name) && policyAllows(p, cert)
		}) {
			add("Certificate %s is allowed by no CertificateRequestPolicy bound in its namespace: with the built-in approver off it is never issued", key)
		}
	}
	return append(out, clientIdentityProblems(b, certs, policies, bound)...)
}

// policyAllows reports whether a policy selects the certificate's issuer
// and allows what it asks for.
func policyAllows(p *crPolicy, c *cmCertificate) bool {
	ref, a := p.Spec.Selector.IssuerRef, p.Spec.Allowed
	if ref == nil || a == nil || !wildcardMatch(ref.Name, c.Spec.IssuerRef.Name) || !wildcardMatch(ref.Kind, c.Spec.IssuerRef.Kind) {
		return false
	}
	in := func(l *crPolicyStringList, vals []string) bool {
		for _, v := range vals {
			if l == nil || !slices.ContainsFunc(l.Values, func(p string) bool { return wildcardMatch(p, v) }) {
				return false
			}
		}
		return true
	}
	usages := c.Spec.Usages
	if len(usages) == 0 {
		usages = []string{"digital signature", "key encipherment"}
	}
	if c.Spec.IsCA {
		usages = append(slices.Clone(usages), "cert sign")
	}
	return (c.Spec.CommonName == "" || (a.CommonName != nil && wildcardMatch(a.CommonName.Value, c.Spec.CommonName))) &&
		in(a.DNSNames, c.Spec.DNSNames) && in(a.URIs, c.Spec.URIs) &&
		(!c.Spec.IsCA || (a.IsCA != nil && *a.IsCA)) &&
		!slices.ContainsFunc(usages, func(u string) bool { return !slices.Contains(a.Usages, u) })
}

// overlays/aks with the spiffe component (and the purge job) renders and
// decodes strictly; the server trusts the one root that signs the SVIDs,
// the server's and the purge job's certificates; every Certificate has a
// policy bound in its own namespace and none selects the SVIDs' issuer;
// the policy's identities have the form csi-driver-spiffe issues; and the
// example team-a client gets spiffe://cluster.local/ns/team-a/sa/trainer,
// which the policy grants.
func TestSpiffeComponent(t *testing.T) {
	_, b := renderAKSWith(t, "components/purge", "components/spiffe")
	for _, p := range spiffeProblems(b.objects) {
		t.Error(p)
	}
	ids := policyGrants(t, b)
	form := regexp.MustCompile(`^spiffe://` + regexp.QuoteMeta(spiffeTrustDomain) + `/ns/[a-z0-9-]+/sa/[a-z0-9-]+$`)
	for _, id := range ids {
		if !form.MatchString(id) {
			t.Errorf("the policy grants %q, which csi-driver-spiffe never issues (spiffe://%s/ns/NS/sa/SA)", id, spiffeTrustDomain)
		}
	}
	for _, o := range b.objects {
		if cj, ok := o.(*batchv1.CronJob); ok {
			want := spiffeID(cj.Namespace, cj.Spec.JobTemplate.Spec.Template.Spec.ServiceAccountName)
			if !slices.Contains(ids, want) {
				t.Errorf("the policy does not grant the purge job's identity %s", want)
			}
		}
	}

	_, ex := renderOnDisk(t, "examples/team-a")
	var n int
	for _, d := range ex.deployments {
		n++
		spec := &d.Spec.Template.Spec
		c := &spec.Containers[0]
		vol, mount := spiffeVolume(spec, c)
		if vol == nil || vol.CSI.ReadOnly == nil || !*vol.CSI.ReadOnly {
			t.Errorf("Deployment %s/%s mounts no read-only %s volume", d.Namespace, d.Name, spiffeDriver)
			continue
		}
		if g := spec.SecurityContext.RunAsGroup; g == nil || vol.CSI.VolumeAttributes["spiffe.csi.cert-manager.io/fs-group"] != fmt.Sprint(*g) {
			t.Errorf("Deployment %s: the key is not readable by the pod's group", d.Name)
		}
		if id := spiffeID(d.Namespace, spec.ServiceAccountName); !slices.Contains(ids, id) {
			t.Errorf("the example client's identity %s is not granted by the aks policy %v", id, ids)
		}
		if !canCreateRequests(ex.objects, d.Namespace, spec.ServiceAccountName) {
			t.Errorf("ServiceAccount %s/%s may not create CertificateRequests", d.Namespace, spec.ServiceAccountName)
		}
		if d.Spec.Template.Labels["rolloutd.io/client"] != "true" {
			t.Errorf("Deployment %s lacks the label rolloutd's NetworkPolicy admits", d.Name)
		}
		t.Logf("example client %s/%s: identity %s from %s at %s", d.Namespace, d.Name, spiffeID(d.Namespace, spec.ServiceAccountName), spiffeDriver, mount)
	}
	if n != 1 || ex.deployments[0].Namespace != "team-a" {
		t.Fatalf("examples/team-a renders %d Deployments, want the one trainer in team-a", n)
	}
}

// Each spiffe rule fires on a broken copy.
func TestSpiffeRulesFire(t *testing.T) {
	cases := []struct {
		name, want string
		mutate     func(objs []runtime.Object) []runtime.Object
	}{
		{"a policy selects the SVIDs' issuer", "selects the SVIDs' issuer", func(objs []runtime.Object) []runtime.Object {
			p := &crPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all"}}
			p.Spec.Selector.IssuerRef = &cmIssuerReference{Name: "*", Kind: "*Issuer"}
			return append(objs, p)
		}},
		{"the server trusts its own Secret's CA", "--tls-client-ca=/etc/rolloutd/tls/ca.crt", func(objs []runtime.Object) []runtime.Object {
			args := newBundle(objs).deployment(appName).Spec.Template.Spec.Containers[0].Args
			for i, a := range args {
				if strings.HasPrefix(a, "--tls-client-ca=") {
					args[i] = "--tls-client-ca=/etc/rolloutd/tls/ca.crt"
				}
			}
			return objs
		}},
		{"a policy bound cluster-wide", "bound cluster-wide", func(objs []runtime.Object) []runtime.Object {
			return append(objs, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
		}},
		{"the intermediate self-signed", "is not an intermediate", func(objs []runtime.Object) []runtime.Object {
			for _, o := range objs {
				if c, ok := o.(*cmCertificate); ok && c.Name == "rolloutd-ca" {
					c.Spec.IssuerRef = cmIssuerReference{Name: "rolloutd-selfsigned", Kind: "Issuer"}
				}
			}
			return objs
		}},
		{"the server's policy loses a Service name", "Certificate rolloutd/rolloutd-server is allowed by no", func(objs []runtime.Object) []runtime.Object {
			for _, o := range objs {
				if p, ok := o.(*crPolicy); ok && p.Name == "rolloutd-server" {
					p.Spec.Allowed.DNSNames.Values = p.Spec.Allowed.DNSNames.Values[1:]
				}
			}
			return objs
		}},
	}
	for _, tc := range append(cases, spiffeIdentityCases()...) {
		t.Run(tc.name, func(t *testing.T) {
			_, b := renderAKSWith(t, "components/purge", "components/spiffe")
			got := strings.Join(spiffeProblems(tc.mutate(b.objects)), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("want a problem containing %q, got:\n%s", tc.want, got)
			}
		})
	}
}

// A misspelled field of a CertificateRequestPolicy fails to decode.
func TestMisspelledCertificateRequestPolicyFails(t *testing.T) {
	_, err := decodeManifests([]byte(`apiVersion: policy.cert-manager.io/v1alpha1
kind: CertificateRequestPolicy
metadata:
  name: x
spec:
  selector:
    issuerRef: {name: rolloutd-ca}
  allowed:
    dnsName:
      values: ["*"]
`))
	if err == nil || !strings.Contains(err.Error(), "dnsName") {
		t.Fatalf("a CertificateRequestPolicy with allowed.dnsName decoded: %v", err)
	}
	t.Logf("fails as it should: %v", err)
}
