package check

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Who may hold a client identity with the spiffe component on. Every client
// gets its identity from csi-driver-spiffe, bound to its service account;
// nothing else may mint one:
//   - no CertificateRequestPolicy allows a URI beyond the exact ones the
//     rendered Certificates of its namespaces ask for (today none): a
//     pattern would let anyone who may create a Certificate there be any
//     identity it matches;
//   - the purge job mounts a spiffe volume, and no Certificate puts its
//     identity in a Secret (which any pod of the namespace may mount);
//   - the intermediate rolloutd-ca, whose key is a Secret of namespace
//     rolloutd, is name-constrained to the server's DNS names and excludes
//     the trust domain's URIs;
//   - cert-manager's own SPIFFE ID is granted nothing: cert-manager makes
//     every Certificate's request, so csi-driver-spiffe's approver (URI ==
//     requester) would sign it for anyone who may create a Certificate.

// clientIdentityProblems checks the rules above on the rendered objects.
// bound maps a namespace to the policies cert-manager may use there.
func clientIdentityProblems(b *bundle, certs map[string]*cmCertificate, policies []*crPolicy, bound map[string][]string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	certManager := spiffeID("cert-manager", "cert-manager")
	for _, p := range policies {
		if p.Spec.Allowed == nil || p.Spec.Allowed.URIs == nil {
			continue
		}
		for _, uri := range p.Spec.Allowed.URIs.Values {
			switch {
			case strings.Contains(uri, "*"):
				add("CertificateRequestPolicy/%s allows the URI pattern %q: whoever may create a Certificate where it is bound gets any identity it matches", p.Name, uri)
			case uri == certManager:
				add("CertificateRequestPolicy/%s allows %s, cert-manager's own identity", p.Name, uri)
			case !slices.ContainsFunc(sortedKeys(certs), func(k string) bool {
				c := certs[k]
				return slices.Contains(c.Spec.URIs, uri) && slices.Contains(bound[c.Namespace], p.Name) && policyAllows(p, c)
			}):
				add("CertificateRequestPolicy/%s allows %s, which no Certificate of its namespaces asks for: anyone who may create one there could", p.Name, uri)
			}
		}
	}
	if cm := b.configMap("rolloutd-authz"); cm != nil {
		var policy struct {
			Grants []struct{ Identities []string }
		}
		if err := json.Unmarshal([]byte(cm.Data["policy.json"]), &policy); err != nil {
			add("ConfigMap/rolloutd-authz: %v", err)
		}
		for _, g := range policy.Grants {
			for _, id := range g.Identities {
				if strings.TrimPrefix(id, "uri:") == certManager {
					add("the policy grants %s: cert-manager requests every Certificate, so anyone who may create one can be it", id)
				}
			}
		}
	}
	for _, o := range b.objects {
		// A job that dials rolloutd with a client certificate (purge); the
		// export job reads the store with its own Azure identity.
		if cj, ok := o.(*batchv1.CronJob); ok {
			if _, _, client := b.flagValue(&cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0], "tls-cert"); client {
				out = append(out, jobIdentityProblems(b, certs, cj)...)
			}
		}
	}
	if inter := certs["rolloutd/rolloutd-ca"]; inter != nil {
		out = append(out, intermediateConstraintProblems(inter, certs)...)
	}
	return out
}

// jobIdentityProblems checks that a CronJob's client certificate, key and
// CA come from its own spiffe volume, and that no Certificate mints its
// identity into a Secret.
func jobIdentityProblems(b *bundle, certs map[string]*cmCertificate, cj *batchv1.CronJob) []string {
	var out []string
	spec := &cj.Spec.JobTemplate.Spec.Template.Spec
	id := spiffeID(cj.Namespace, spec.ServiceAccountName)
	for _, k := range sortedKeys(certs) {
		if slices.Contains(certs[k].Spec.URIs, id) {
			out = append(out, fmt.Sprintf("Certificate %s still puts CronJob/%s's identity %s in a Secret, which any pod of %s may mount", k, cj.Name, id, certs[k].Namespace))
		}
	}
	c := &spec.Containers[0]
	vol, mount := spiffeVolume(spec, c)
	if vol == nil {
		return append(out, fmt.Sprintf("CronJob/%s mounts no %s volume: its identity %s does not come from its service account", cj.Name, spiffeDriver, id))
	}
	for _, flag := range []string{"tls-cert", "tls-key", "tls-ca"} {
		if v, _, _ := b.flagValue(c, flag); !strings.HasPrefix(v, mount+"/") {
			out = append(out, fmt.Sprintf("CronJob/%s: --%s=%s is not in its spiffe volume %s", cj.Name, flag, v, mount))
		}
	}
	if vol.CSI.ReadOnly == nil || !*vol.CSI.ReadOnly || spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil ||
		vol.CSI.VolumeAttributes["spiffe.csi.cert-manager.io/fs-group"] != fmt.Sprint(*spec.SecurityContext.FSGroup) {
		out = append(out, fmt.Sprintf("CronJob/%s: its spiffe volume is not read-only and readable by its fsGroup", cj.Name))
	}
	if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil }) {
		out = append(out, fmt.Sprintf("CronJob/%s still mounts a Secret", cj.Name))
	}
	if !canCreateRequests(b.objects, cj.Namespace, spec.ServiceAccountName) {
		out = append(out, fmt.Sprintf("ServiceAccount %s may not create CertificateRequests in %s: the driver cannot request CronJob/%s's volume", spec.ServiceAccountName, cj.Namespace, cj.Name))
	}
	return out
}

// intermediateConstraintProblems checks rolloutd-ca's name constraints:
// critical, the DNS names of what it signs permitted, the trust domain's
// URIs not.
func intermediateConstraintProblems(inter *cmCertificate, certs map[string]*cmCertificate) []string {
	nc := inter.Spec.NameConstraints
	if nc == nil || !nc.Critical || nc.Permitted == nil || len(nc.Permitted.DNSDomains) == 0 {
		return []string{"Certificate/rolloutd-ca has no critical nameConstraints permitting only the server's DNS names: its key, a Secret in namespace rolloutd, signs any name or identity the root's verifiers accept"}
	}
	var out []string
	if !uriHostExcluded(nc, spiffeTrustDomain) {
		out = append(out, fmt.Sprintf("Certificate/rolloutd-ca's nameConstraints permit URIs of %s: its key can mint any client identity", spiffeTrustDomain))
	}
	for _, k := range sortedKeys(certs) {
		c := certs[k]
		if c.Namespace != inter.Namespace || c.Spec.IssuerRef.Kind != "Issuer" || c.Spec.IssuerRef.Name != inter.Name {
			continue
		}
		for _, n := range c.Spec.DNSNames {
			if !slices.ContainsFunc(nc.Permitted.DNSDomains, func(d string) bool { return dnsWithin(n, d) }) {
				out = append(out, fmt.Sprintf("Certificate %s asks for %s, outside rolloutd-ca's permitted DNS names: verifiers would refuse it", k, n))
			}
		}
		if len(c.Spec.URIs) > 0 {
			out = append(out, fmt.Sprintf("Certificate %s asks rolloutd-ca for URIs %v: only csi-driver-spiffe issues identities", k, c.Spec.URIs))
		}
	}
	return out
}

// dnsWithin is RFC 5280's dNSName constraint: the name is the domain or
// under it.
func dnsWithin(name, domain string) bool {
	name, domain = strings.ToLower(name), strings.ToLower(domain)
	if strings.HasPrefix(domain, ".") {
		return strings.HasSuffix(name, domain)
	}
	return name == domain || strings.HasSuffix(name, "."+domain)
}

// uriHostExcluded reports whether a certificate with a URI whose host is
// host fails the constraints, as Go's crypto/x509 verifies them.
func uriHostExcluded(nc *cmNameConstraints, host string) bool {
	if nc.Excluded != nil && slices.ContainsFunc(nc.Excluded.URIDomains, func(d string) bool { return dnsWithin(host, d) }) {
		return true
	}
	return nc.Permitted != nil && len(nc.Permitted.URIDomains) > 0 &&
		!slices.ContainsFunc(nc.Permitted.URIDomains, func(d string) bool { return dnsWithin(host, d) })
}

// spiffeIdentityCases are TestSpiffeRulesFire's broken copies for the rules
// above; each is a layout this repository had or an easy slip.
func spiffeIdentityCases() []struct {
	name, want string
	mutate     func(objs []runtime.Object) []runtime.Object
} {
	cronJob := func(objs []runtime.Object) *corev1.PodSpec {
		for _, o := range objs {
			if cj, ok := o.(*batchv1.CronJob); ok {
				return &cj.Spec.JobTemplate.Spec.Template.Spec
			}
		}
		panic("no CronJob")
	}
	inter := func(objs []runtime.Object) *cmCertificate {
		for _, o := range objs {
			if c, ok := o.(*cmCertificate); ok && c.Name == "rolloutd-ca" {
				return c
			}
		}
		panic("no rolloutd-ca")
	}
	withPolicy4 := func(uri string) func(objs []runtime.Object) []runtime.Object {
		return func(objs []runtime.Object) []runtime.Object {
			p := &crPolicy{}
			p.Name = "rolloutd-namespace-clients"
			p.Spec.Selector.IssuerRef = &cmIssuerReference{Name: "rolloutd-ca", Kind: "Issuer", Group: "cert-manager.io"}
			p.Spec.Allowed = &crPolicyAllowed{URIs: &crPolicyStringList{Values: []string{uri}}, Usages: []string{"digital signature", "key encipherment", "client auth"}}
			return append(objs, p)
		}
	}
	return []struct {
		name, want string
		mutate     func(objs []runtime.Object) []runtime.Object
	}{
		{"policy 4 allows every identity of namespace rolloutd", `allows the URI pattern "spiffe://cluster.local/ns/rolloutd/sa/*"`,
			withPolicy4("spiffe://cluster.local/ns/rolloutd/sa/*")},
		{"policy 4 allows purge's identity with no Certificate asking", "allows spiffe://cluster.local/ns/rolloutd/sa/rolloutd-purge, which no Certificate",
			withPolicy4(spiffeID("rolloutd", "rolloutd-purge"))},
		{"a policy allows cert-manager's identity", "cert-manager's own identity", withPolicy4(spiffeID("cert-manager", "cert-manager"))},
		{"the authz policy grants cert-manager's identity", "the policy grants spiffe://cluster.local/ns/cert-manager/sa/cert-manager", func(objs []runtime.Object) []runtime.Object {
			cm := newBundle(objs).configMap("rolloutd-authz")
			cm.Data["policy.json"] = `{"grants":[{"identities":["spiffe://cluster.local/ns/cert-manager/sa/cert-manager"],"shardPrefixes":["team-a"],"verbs":["delete"]}]}`
			return objs
		}},
		{"the purge pod mounts its Secret", "CronJob/rolloutd-purge mounts no spiffe.csi.cert-manager.io volume", func(objs []runtime.Object) []runtime.Object {
			spec := cronJob(objs)
			spec.Volumes[0].VolumeSource = corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "rolloutd-client-purge"}}
			return objs
		}},
		{"the purge Certificate is still there", "Certificate rolloutd/rolloutd-client-purge still puts", func(objs []runtime.Object) []runtime.Object {
			c := &cmCertificate{Spec: cmCertificateSpec{SecretName: "rolloutd-client-purge", URIs: []string{spiffeID("rolloutd", "rolloutd-purge")},
				IssuerRef: cmIssuerReference{Name: "rolloutd-ca", Kind: "Issuer"}}}
			c.Name, c.Namespace = "rolloutd-client-purge", "rolloutd"
			return append(objs, c)
		}},
		{"purge may not request its volume", "the driver cannot request CronJob/rolloutd-purge's volume", func(objs []runtime.Object) []runtime.Object {
			for _, o := range objs {
				if rb, ok := o.(*rbacv1.RoleBinding); ok {
					rb.Subjects = slices.DeleteFunc(rb.Subjects, func(s rbacv1.Subject) bool { return s.Name == "rolloutd-purge" })
				}
			}
			return objs
		}},
		{"rolloutd-ca unconstrained", "Certificate/rolloutd-ca has no critical nameConstraints", func(objs []runtime.Object) []runtime.Object {
			inter(objs).Spec.NameConstraints = nil
			return objs
		}},
		{"rolloutd-ca may sign the trust domain's URIs", "permit URIs of cluster.local", func(objs []runtime.Object) []runtime.Object {
			if nc := inter(objs).Spec.NameConstraints; nc != nil {
				nc.Excluded = nil
			}
			return objs
		}},
		{"the server asks for a name rolloutd-ca may not sign", "outside rolloutd-ca's permitted DNS names", func(objs []runtime.Object) []runtime.Object {
			if nc := inter(objs).Spec.NameConstraints; nc != nil && nc.Permitted != nil {
				nc.Permitted.DNSDomains = nc.Permitted.DNSDomains[1:]
			}
			return objs
		}},
	}
}

// The spiffe component without the purge job renders and passes: its purge
// patches select by target, so they change nothing when there is no purge
// job to patch.
func TestSpiffeWithoutPurge(t *testing.T) {
	_, b := renderAKSWith(t, "components/spiffe")
	for _, p := range spiffeProblems(b.objects) {
		t.Error(p)
	}
}
