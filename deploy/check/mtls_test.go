package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// cert-manager's v1 API (cert-manager.io/v1), as far as rolloutd's mTLS
// overlay uses it: Certificate and Issuer, with the JSON field names of
// cert-manager v1.21's pkg/apis/certmanager/v1 (status left out: manifests
// never set it). Registering them in the package's strict scheme makes every
// Certificate and Issuer under deploy/k8s decode strictly, so a misspelled
// field fails like one in a Deployment. Sub-objects the overlay does not use
// (keystores, renewal windows, name constraints, the ACME, Vault and Venafi
// issuers) are accepted as raw JSON.
//
// The module does not depend on cert-manager itself to keep its graph
// small; these types are a transcription, checked against the upstream
// types when they were written.

var certManagerV1 = schema.GroupVersion{Group: "cert-manager.io", Version: "v1"}

func init() {
	scheme.AddKnownTypeWithName(certManagerV1.WithKind("Certificate"), &cmCertificate{})
	scheme.AddKnownTypeWithName(certManagerV1.WithKind("Issuer"), &cmIssuer{})
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cmCertificateSpec `json:"spec"`
}

type cmCertificateSpec struct {
	Subject                 *cmX509Subject          `json:"subject,omitempty"`
	LiteralSubject          string                  `json:"literalSubject,omitempty"`
	CommonName              string                  `json:"commonName,omitempty"`
	Duration                *metav1.Duration        `json:"duration,omitempty"`
	RenewBefore             *metav1.Duration        `json:"renewBefore,omitempty"`
	RenewBeforePercentage   *int32                  `json:"renewBeforePercentage,omitempty"`
	Renewal                 *runtime.RawExtension   `json:"renewal,omitempty"`
	DNSNames                []string                `json:"dnsNames,omitempty"`
	IPAddresses             []string                `json:"ipAddresses,omitempty"`
	URIs                    []string                `json:"uris,omitempty"`
	OtherNames              []cmOtherName           `json:"otherNames,omitempty"`
	EmailAddresses          []string                `json:"emailAddresses,omitempty"`
	SecretName              string                  `json:"secretName"`
	SecretTemplate          *cmSecretTemplate       `json:"secretTemplate,omitempty"`
	Keystores               *runtime.RawExtension   `json:"keystores,omitempty"`
	IssuerRef               cmIssuerReference       `json:"issuerRef"`
	IsCA                    bool                    `json:"isCA,omitempty"`
	Usages                  []string                `json:"usages,omitempty"`
	PrivateKey              *cmPrivateKey           `json:"privateKey,omitempty"`
	SignatureAlgorithm      string                  `json:"signatureAlgorithm,omitempty"`
	EncodeUsagesInRequest   *bool                   `json:"encodeUsagesInRequest,omitempty"`
	RevisionHistoryLimit    *int32                  `json:"revisionHistoryLimit,omitempty"`
	AdditionalOutputFormats []cmAdditionalOutFormat `json:"additionalOutputFormats,omitempty"`
	NameConstraints         *cmNameConstraints      `json:"nameConstraints,omitempty"`
}

// cmNameConstraints is cert-manager's nameConstraints of a CA Certificate
// (cert-manager 1.14+), typed so that a misspelled field fails to decode.
type cmNameConstraints struct {
	Critical  bool                  `json:"critical,omitempty"`
	Permitted *cmNameConstraintItem `json:"permitted,omitempty"`
	Excluded  *cmNameConstraintItem `json:"excluded,omitempty"`
}

type cmNameConstraintItem struct {
	DNSDomains     []string `json:"dnsDomains,omitempty"`
	IPRanges       []string `json:"ipRanges,omitempty"`
	EmailAddresses []string `json:"emailAddresses,omitempty"`
	URIDomains     []string `json:"uriDomains,omitempty"`
}

type cmX509Subject struct {
	Organizations       []string `json:"organizations,omitempty"`
	Countries           []string `json:"countries,omitempty"`
	OrganizationalUnits []string `json:"organizationalUnits,omitempty"`
	Localities          []string `json:"localities,omitempty"`
	Provinces           []string `json:"provinces,omitempty"`
	StreetAddresses     []string `json:"streetAddresses,omitempty"`
	PostalCodes         []string `json:"postalCodes,omitempty"`
	SerialNumber        string   `json:"serialNumber,omitempty"`
}

type cmOtherName struct {
	OID       string `json:"oid,omitempty"`
	UTF8Value string `json:"utf8Value,omitempty"`
}

type cmSecretTemplate struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

type cmIssuerReference struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

type cmPrivateKey struct {
	RotationPolicy string `json:"rotationPolicy,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
	Algorithm      string `json:"algorithm,omitempty"`
	Size           int    `json:"size,omitempty"`
}

type cmAdditionalOutFormat struct {
	Type string `json:"type"`
}

type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              cmIssuerSpec `json:"spec"`
}

type cmIssuerSpec struct {
	ACME       *runtime.RawExtension `json:"acme,omitempty"`
	CA         *cmCAIssuer           `json:"ca,omitempty"`
	Vault      *runtime.RawExtension `json:"vault,omitempty"`
	SelfSigned *cmSelfSignedIssuer   `json:"selfSigned,omitempty"`
	Venafi     *runtime.RawExtension `json:"venafi,omitempty"`
}

type cmCAIssuer struct {
	SecretName             string   `json:"secretName"`
	CRLDistributionPoints  []string `json:"crlDistributionPoints,omitempty"`
	OCSPServers            []string `json:"ocspServers,omitempty"`
	IssuingCertificateURLs []string `json:"issuingCertificateURLs,omitempty"`
}

type cmSelfSignedIssuer struct {
	CRLDistributionPoints []string `json:"crlDistributionPoints,omitempty"`
}

func (c *cmCertificate) DeepCopyObject() runtime.Object { return deepCopyJSON(c, &cmCertificate{}) }
func (i *cmIssuer) DeepCopyObject() runtime.Object      { return deepCopyJSON(i, &cmIssuer{}) }

func deepCopyJSON[T runtime.Object](from, to T) runtime.Object {
	b, err := json.Marshal(from)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		panic(err)
	}
	return to
}

// mtlsBundle is the rendered mTLS overlay with its cert-manager objects.
type mtlsBundle struct {
	*bundle
	certs   map[string]*cmCertificate
	issuers map[string]*cmIssuer
}

func renderMTLS(t *testing.T) mtlsBundle {
	t.Helper()
	_, b := renderOnDisk(t, "overlays/mtls")
	return newMTLSBundle(b)
}

func newMTLSBundle(b *bundle) mtlsBundle {
	m := mtlsBundle{bundle: b, certs: map[string]*cmCertificate{}, issuers: map[string]*cmIssuer{}}
	for _, o := range b.objects {
		switch o := o.(type) {
		case *cmCertificate:
			m.certs[o.Name] = o
		case *cmIssuer:
			m.issuers[o.Name] = o
		}
	}
	return m
}

// The mTLS overlay and the aks overlay built on it render; the rules every
// deployment passes still hold (probes aside: they move to the
// health-only port on purpose); and the TLS, policy and probe wiring is
// consistent from the Certificate to the flags.
func TestMTLSOverlay(t *testing.T) {
	for _, dir := range []string{"overlays/mtls", "overlays/aks"} {
		t.Run(dir, func(t *testing.T) {
			_, b := renderOnDisk(t, dir)
			checkMTLSBundle(t, newMTLSBundle(b))
		})
	}
}

func checkMTLSBundle(t *testing.T, m mtlsBundle) {
	t.Helper()
	kinds := map[string]int{}
	for _, o := range m.objects {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
	}
	want := map[string]int{"Namespace": 1, "ServiceAccount": 1, "ConfigMap": 2, "Deployment": 1, "Service": 2,
		"PodDisruptionBudget": 1, "NetworkPolicy": 1, "HorizontalPodAutoscaler": 1, "Certificate": 3, "Issuer": 2}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("rendered kinds %v, want %v", kinds, want)
	}
	for _, o := range m.objects {
		if _, cluster := o.(*corev1.Namespace); !cluster && namespaceOf(o) != "rolloutd" {
			t.Errorf("%s is in namespace %q, want rolloutd", describe(o), namespaceOf(o))
		}
	}

	// The shared rules, with the probe-port rule replaced by the one below.
	for _, p := range m.problems(true) {
		if strings.Contains(p, "Probe checks port 8081, not the gRPC port") {
			continue
		}
		t.Errorf("rule: %s", p)
	}
	for _, p := range m.mtlsProblems() {
		t.Errorf("mTLS rule: %s", p)
	}
}

// mtlsProblems checks the overlay's own rules.
func (m mtlsBundle) mtlsProblems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	d := m.deployment(appName)
	if d == nil {
		return []string{"no Deployment/rolloutd"}
	}
	spec := &d.Spec.Template.Spec
	c := container(spec, containerName)
	if c == nil {
		return []string{"no container rolloutd"}
	}

	// Every issuerRef names an Issuer in the bundle; the CA chain is
	// self-signed root → CA Issuer.
	for name, cert := range m.certs {
		ref := cert.Spec.IssuerRef
		if (ref.Kind != "" && ref.Kind != "Issuer") || m.issuers[ref.Name] == nil {
			add("Certificate/%s: issuerRef %+v names no Issuer of the overlay", name, ref)
		}
		if cert.Spec.PrivateKey == nil || cert.Spec.PrivateKey.Algorithm == "" {
			add("Certificate/%s: no explicit private key algorithm", name)
		}
		if cert.Spec.Duration == nil || cert.Spec.RenewBefore == nil || cert.Spec.RenewBefore.Duration >= cert.Spec.Duration.Duration {
			add("Certificate/%s: renewBefore must be set and shorter than duration", name)
		}
	}
	caOK := false
	if ca := m.issuers["rolloutd-ca"]; ca != nil && ca.Spec.CA != nil {
		for _, c := range m.certs {
			if c.Spec.IsCA && c.Spec.SecretName == ca.Spec.CA.SecretName {
				caOK = true
			}
		}
	}
	if !caOK {
		add("Issuer/rolloutd-ca is not a CA Issuer over the overlay's CA Certificate")
	}

	// The server certificate: server auth, rotated keys, every Service name
	// clients dial.
	server := m.certs["rolloutd-server"]
	if server == nil {
		return append(out, "no Certificate/rolloutd-server")
	}
	if !slices.Contains(server.Spec.Usages, "server auth") || server.Spec.IsCA {
		add("Certificate/rolloutd-server: usages %v lack server auth (or it is a CA)", server.Spec.Usages)
	}
	if server.Spec.PrivateKey.RotationPolicy != "Always" {
		add("Certificate/rolloutd-server: privateKey.rotationPolicy %q, want Always", server.Spec.PrivateKey.RotationPolicy)
	}
	for _, s := range m.services {
		for _, name := range []string{s.Name + "." + s.Namespace + ".svc", s.Name + "." + s.Namespace + ".svc.cluster.local"} {
			if !slices.Contains(server.Spec.DNSNames, name) {
				add("Certificate/rolloutd-server: dnsNames lack %s (Service/%s)", name, s.Name)
			}
		}
		for _, p := range s.Spec.Ports {
			if p.AppProtocol != nil && *p.AppProtocol == "kubernetes.io/h2c" {
				add("Service/%s: port %s still says kubernetes.io/h2c, but gRPC is TLS", s.Name, p.Name)
			}
		}
	}
	for name, cert := range m.certs {
		if name == "rolloutd-server" || cert.Spec.IsCA {
			continue
		}
		if !slices.Contains(cert.Spec.Usages, "client auth") || len(cert.Spec.URIs) == 0 || !strings.HasPrefix(cert.Spec.URIs[0], "spiffe://") {
			add("Certificate/%s: a client certificate needs client auth and a spiffe:// URI SAN (its identity)", name)
		}
	}

	// The flags read the files of the mounted Secret and ConfigMap.
	mounts := map[string]corev1.Volume{} // mount path → volume
	for _, vm := range c.VolumeMounts {
		if vm.SubPath != "" {
			add("volumeMount %s uses subPath, which freezes the file: rotations would not reach rolloutd", vm.Name)
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name {
				mounts[vm.MountPath] = v
			}
		}
	}
	fileFrom := func(flag string) (corev1.Volume, string) {
		v, _, ok := m.flagValue(c, flag)
		if !ok {
			add("--%s is not set", flag)
			return corev1.Volume{}, ""
		}
		vol, ok := mounts[filepath.Dir(v)]
		if !ok {
			add("--%s=%s is not in a mounted volume", flag, v)
		}
		return vol, filepath.Base(v)
	}
	for flag, key := range map[string]string{"tls-cert": "tls.crt", "tls-key": "tls.key", "tls-client-ca": "ca.crt"} {
		vol, file := fileFrom(flag)
		if vol.Secret == nil || vol.Secret.SecretName != server.Spec.SecretName || file != key {
			add("--%s reads %s from volume %s, want %s of Secret %s (Certificate/rolloutd-server)", flag, file, vol.Name, key, server.Spec.SecretName)
		}
	}
	vol, file := fileFrom("authz-file")
	if vol.ConfigMap == nil {
		add("--authz-file is not read from a ConfigMap volume")
	} else if cm := m.configMap(vol.ConfigMap.Name); cm == nil {
		add("--authz-file: ConfigMap %s is not in the manifests", vol.ConfigMap.Name)
	} else if _, ok := cm.Data[file]; !ok {
		add("--authz-file: ConfigMap %s has no key %s", cm.Name, file)
	}

	// Probes: the health-only port, which --health-listen serves.
	hl, _, ok := m.flagValue(c, "health-listen")
	port, err := listenPort(hl)
	if !ok || err != nil {
		add("--health-listen=%q: %v", hl, err)
	}
	hp, ok := containerPort(c, intstr.FromString("health"))
	if !ok || hp.ContainerPort != port {
		add("--health-listen=%s but the container port named health is %v", hl, hp)
	}
	for kind, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != port {
			add("%s does not probe gRPC health on the health-only port %d", kind, port)
		}
	}
	// The health port is not opened to the network: only kubelet, which
	// NetworkPolicy does not restrict, needs it.
	for _, np := range m.netpols {
		for _, r := range np.Spec.Ingress {
			for _, p := range r.Ports {
				if p.Port != nil && (p.Port.IntVal == port || p.Port.StrVal == "health") {
					add("NetworkPolicy/%s opens the health port", np.Name)
				}
			}
		}
	}
	if v, _, _ := m.flagValue(c, "metrics-tls"); v != "tls" && v != "mtls" {
		add("--metrics-tls=%q: metrics should be TLS beside an mTLS gRPC port", v)
	} else if d.Spec.Template.Annotations["prometheus.io/scheme"] != "https" {
		add("prometheus.io/scheme is not https for TLS metrics")
	}
	return out
}

// Each mTLS rule fires on a broken copy of the overlay.
func TestMTLSRulesFire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(m mtlsBundle)
		want    string
	}{
		{"server cert misses the headless Service", func(m mtlsBundle) {
			s := m.certs["rolloutd-server"]
			s.Spec.DNSNames = slices.DeleteFunc(s.Spec.DNSNames, func(n string) bool { return strings.HasPrefix(n, "rolloutd-headless") })
		}, "dnsNames lack rolloutd-headless.rolloutd.svc"},
		{"probe on the mTLS port", func(m mtlsBundle) {
			container(&m.deployment(appName).Spec.Template.Spec, containerName).ReadinessProbe.GRPC.Port = 50051
		}, "readinessProbe does not probe"},
		{"key from another Secret", func(m mtlsBundle) {
			m.certs["rolloutd-server"].Spec.SecretName = "elsewhere"
		}, "--tls-key reads"},
		{"subPath mount", func(m mtlsBundle) {
			c := container(&m.deployment(appName).Spec.Template.Spec, containerName)
			for i := range c.VolumeMounts {
				c.VolumeMounts[i].SubPath = "x"
			}
		}, "subPath"},
		{"client cert without a SPIFFE ID", func(m mtlsBundle) {
			m.certs["rolloutd-client-team-a-trainer"].Spec.URIs = nil
		}, "spiffe:// URI SAN"},
		{"issuer missing", func(m mtlsBundle) { delete(m.issuers, "rolloutd-ca") }, "names no Issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := renderMTLS(t)
			tc.breakIt(m)
			got := strings.Join(m.mtlsProblems(), "\n")
			if !strings.Contains(got, tc.want) {
				t.Errorf("want a problem mentioning %q, got:\n%s", tc.want, got)
			}
		})
	}
}

// A misspelled field in a Certificate fails strict decoding, as one in a
// Deployment does: the cert-manager types are registered strictly.
func TestMisspelledCertificateFails(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(k8sDir(), "overlays", "mtls", "certificates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decodeManifests(data); err != nil {
		t.Fatalf("certificates.yaml: %v", err)
	}
	for typo, with := range map[string]string{
		"dnsNames:":                       "dnsnames:",
		"secretName: rolloutd-server-tls": "secretname: rolloutd-server-tls",
		"rotationPolicy:":                 "rotationPolicys:",
		"issuerRef:":                      "issuerRefs:",
		"selfSigned: {}":                  "selfsigned: {}",
	} {
		bad := strings.Replace(string(data), typo, with, 1)
		if bad == string(data) {
			t.Fatalf("typo %q did not apply", typo)
		}
		_, err := decodeManifests([]byte(bad))
		if err == nil || !runtime.IsStrictDecodingError(unwrapAll(err)) {
			t.Errorf("a misspelled %q decoded: %v", typo, err)
		} else {
			t.Logf("misspelled %q fails as it should: %v", typo, err)
		}
	}
}

// A misspelled field of a Certificate's nameConstraints fails to decode, so
// a typo cannot silently leave the intermediate unconstrained.
func TestMisspelledNameConstraintsFails(t *testing.T) {
	_, err := decodeManifests([]byte(`apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: x
spec:
  isCA: true
  secretName: x
  issuerRef: {name: ca}
  nameConstraints:
    critical: true
    permitted:
      dnsDomain: [rolloutd]
`))
	if err == nil || !strings.Contains(err.Error(), "dnsDomain") {
		t.Fatalf("a Certificate with nameConstraints.permitted.dnsDomain decoded: %v", err)
	}
	t.Logf("fails as it should: %v", err)
}
