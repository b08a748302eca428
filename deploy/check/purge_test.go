package check

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

func init() { utilruntime.Must(batchv1.AddToScheme(scheme)) }

// The optional purge component renders on overlays/aks: a CronJob that
// runs `rolloutd admin purge` under its own ServiceAccount and client
// certificate, whose identity the aks example policy (the ConfigMap key
// policy.json, which a component cannot extend) grants list, describe and
// delete on the prefix the job purges (and nothing else), with the
// server's image, hardened like the server.
func TestPurgeComponent(t *testing.T) {
	_, b := renderAKSWith(t, "components/purge")
	kinds := map[string]int{}
	var cj *batchv1.CronJob
	var sa *corev1.ServiceAccount
	var cert *cmCertificate
	for _, o := range b.objects {
		kinds[o.GetObjectKind().GroupVersionKind().Kind]++
		switch o := o.(type) {
		case *batchv1.CronJob:
			cj = o
		case *corev1.ServiceAccount:
			if o.Name == "rolloutd-purge" {
				sa = o
			}
		case *cmCertificate:
			if o.Name == "rolloutd-client-purge" {
				cert = o
			}
		}
		if _, cluster := o.(*corev1.Namespace); !cluster && namespaceOf(o) != "rolloutd" {
			t.Errorf("%s is in namespace %q, want rolloutd", describe(o), namespaceOf(o))
		}
	}
	want := map[string]int{"Namespace": 1, "ServiceAccount": 2, "ConfigMap": 2, "Deployment": 1, "Service": 2,
		"PodDisruptionBudget": 1, "NetworkPolicy": 1, "HorizontalPodAutoscaler": 1, "Certificate": 4, "Issuer": 2, "CronJob": 1}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("rendered kinds %v, want %v", kinds, want)
	}
	if cj == nil || sa == nil || cert == nil {
		t.Fatal("no CronJob, ServiceAccount or Certificate of the purge job")
	}
	spec := cj.Spec.JobTemplate.Spec.Template.Spec
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Error("two purges may run at once")
	}
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("the job runs as %q, want its own ServiceAccount %q", spec.ServiceAccountName, sa.Name)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if server := rolloutdContainer(t, b); c.Image != server.Image {
		t.Errorf("the job's image %q is not the server's %q", c.Image, server.Image)
	}
	args := strings.Join(c.Args, " ")
	for _, a := range []string{"admin purge", "--prefix=", "--older-than=", "--tls-cert=", "--tls-key=", "--tls-ca="} {
		if !strings.Contains(args, a) {
			t.Errorf("the job's args %q lack %q", args, a)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("the job's container is not hardened: %+v", sc)
	}
	if ps := spec.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
		t.Error("the job may run as root")
	}
	if cj.Spec.JobTemplate.Spec.Template.Labels["rolloutd.io/client"] != "true" {
		t.Error("the job's pods lack the label the NetworkPolicy admits")
	}
	secretOK := false
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName {
			secretOK = true
		}
	}
	if !secretOK {
		t.Errorf("the job does not mount its certificate's Secret %q", cert.Spec.SecretName)
	}
	if len(cert.Spec.URIs) != 1 {
		t.Fatalf("purge certificate URIs %v", cert.Spec.URIs)
	}
	var policy struct {
		Grants []struct {
			Identities, ShardPrefixes, Verbs []string
		}
	}
	authz := b.configMap("rolloutd-authz")
	if authz == nil || authz.Data["policy.json"] == "" {
		t.Fatal("overlays/aks renders no ConfigMap rolloutd-authz with a key policy.json")
	}
	if err := json.Unmarshal([]byte(authz.Data["policy.json"]), &policy); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, g := range policy.Grants {
		if slices.Contains(g.Identities, cert.Spec.URIs[0]) {
			verbs = append(verbs, g.Verbs...)
			for _, p := range g.ShardPrefixes {
				if !strings.Contains(args, "--prefix="+p) {
					t.Errorf("the job's identity is granted %q, which its --prefix does not purge", p)
				}
			}
		}
	}
	slices.Sort(verbs)
	if fmt.Sprint(verbs) != "[delete describe list]" {
		t.Errorf("the aks policy grants the purge identity %s %v, want exactly delete, describe and list: add its grant to authz-policy.json (docs/operations.md, section 12)", cert.Spec.URIs[0], verbs)
	}
}
