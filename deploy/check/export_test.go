package check

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestExportJobs renders deploy/k8s/export and checks its Job and CronJob:
// they run `rolloutd export` with flags the built binary's export has, as
// the export service account with workload identity, never overlapping,
// and hardened like the server's pods.
func TestExportJobs(t *testing.T) {
	_, b := renderOnDisk(t, "export")
	bin, _ := buildImageBinary(t)
	out, err := exec.Command(bin, "export", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("rolloutd export --help: %v\n%s", err, out)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags = append(flags, m[1])
	}
	var sas []string
	for _, sa := range b.serviceAccounts {
		if sa.Annotations["azure.workload.identity/client-id"] == "" {
			t.Errorf("ServiceAccount %s has no azure.workload.identity/client-id", sa.Name)
		}
		sas = append(sas, sa.Name)
	}
	var pods []*corev1.PodTemplateSpec
	for _, o := range b.objects {
		switch o := o.(type) {
		case *batchv1.Job:
			pods = append(pods, &o.Spec.Template)
		case *batchv1.CronJob:
			if o.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
				t.Errorf("CronJob %s: concurrencyPolicy %q, want Forbid: two exports must not race on one destination", o.Name, o.Spec.ConcurrencyPolicy)
			}
			pods = append(pods, &o.Spec.JobTemplate.Spec.Template)
		}
	}
	if len(pods) != 2 {
		t.Fatalf("want a Job and a CronJob, got %d pod templates", len(pods))
	}
	for _, p := range pods {
		if p.Labels["azure.workload.identity/use"] != "true" {
			t.Error("export pods must opt in to workload identity (label azure.workload.identity/use: \"true\")")
		}
		if !slices.Contains(sas, p.Spec.ServiceAccountName) {
			t.Errorf("service account %q is not in the kustomization (%v)", p.Spec.ServiceAccountName, sas)
		}
		if len(p.Spec.Containers) != 1 {
			t.Fatalf("want one container, got %d", len(p.Spec.Containers))
		}
		c := p.Spec.Containers[0]
		if len(c.Args) == 0 || c.Args[0] != "export" {
			t.Fatalf("container args %v do not run `rolloutd export`", c.Args)
		}
		for _, a := range c.Args[1:] {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.HasPrefix(a, "-") || !slices.Contains(flags, name) {
				t.Errorf("arg %q is not a flag of rolloutd export (%v)", a, flags)
			}
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Error("the export container must have a read-only root file system and no privilege escalation")
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Error("the export container has no memory limit")
		}
	}
}
