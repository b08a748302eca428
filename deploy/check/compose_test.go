package check

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// optionalParts are the components an operator adds to their own overlay:
// each names the component and the plain kustomization that holds its own
// objects.
var optionalParts = []struct{ component, own string }{
	{"components/purge", "purge"},
	{"components/export", "export"},
	{"components/monitoring", "monitoring"},
}

// k8sInMemory copies deploy/k8s into an in-memory file system at
// /deploy/k8s, so that a test can edit an overlay without touching the
// checkout.
func k8sInMemory(t *testing.T) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	err := filepath.WalkDir(k8sDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return fsys.WriteFile("/"+filepath.ToSlash(rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// renderAKSWith renders overlays/aks with the given components appended to
// its kustomization.yaml, as docs/operations.md tells operators to list
// them, and returns each rendered object's YAML by its identity.
func renderAKSWith(t *testing.T, components ...string) (map[string]string, *bundle) {
	t.Helper()
	fsys := k8sInMemory(t)
	if len(components) > 0 {
		const k = "/deploy/k8s/overlays/aks/kustomization.yaml"
		data, err := fsys.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, "\ncomponents:\n"...)
		for _, c := range components {
			data = append(data, "  - ../../"+c+"\n"...)
		}
		if err := fsys.WriteFile(k, data); err != nil {
			t.Fatal(err)
		}
	}
	out, objs, err := render(fsys, "/deploy/k8s/overlays/aks")
	if err != nil {
		t.Fatalf("overlays/aks with %v: %v", components, err)
	}
	return splitObjects(t, out), newBundle(objs)
}

// splitObjects returns each document of a rendered build by
// apiVersion/kind/namespace/name.
func splitObjects(t *testing.T, out []byte) map[string]string {
	t.Helper()
	objs := map[string]string{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if err == io.EOF {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var id struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct{ Namespace, Name string }
		}
		if err := yaml.Unmarshal(doc, &id); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s %s %s/%s", id.APIVersion, id.Kind, id.Metadata.Namespace, id.Metadata.Name)
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = string(doc)
	}
}

// lineDiff is a small line-by-line diff (longest common subsequence), with
// "-" for want's lines and "+" for got's; enough for one object.
func lineDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j = i+1, j+1
		case j < len(b) && (i == len(a) || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&sb, "+ %s\n", b[j])
			j++
		default:
			fmt.Fprintf(&sb, "- %s\n", a[i])
			i++
		}
	}
	return sb.String()
}

// compositionProblems compares overlays/aks alone (alone) with overlays/aks
// plus one optional part (with): every object of alone must render
// byte-identical, and the only objects added must be the part's own (own).
func compositionProblems(alone, with, own map[string]string) []string {
	var out []string
	for _, key := range sortedKeys(alone) {
		got, ok := with[key]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s of overlays/aks is gone", key))
		case got != alone[key]:
			out = append(out, fmt.Sprintf("%s of overlays/aks changed (- alone, + with the part):\n%s", key, lineDiff(alone[key], got)))
		}
	}
	for _, key := range sortedKeys(with) {
		if _, ok := alone[key]; ok {
			continue
		}
		if _, ok := own[key]; !ok {
			out = append(out, fmt.Sprintf("%s is added, but it is not one of the part's own objects %v", key, sortedKeys(own)))
		}
	}
	for _, key := range sortedKeys(own) {
		if _, ok := with[key]; !ok {
			out = append(out, fmt.Sprintf("the part's own %s is not rendered", key))
		}
	}
	return out
}

// Each optional part, listed as a component of overlays/aks, leaves every
// object of overlays/aks byte-identical and adds only its own objects; the
// jobs run the image overlays/aks sets for the server.
func TestOptionalPartsComposeOnAKS(t *testing.T) {
	alone, aks := renderAKSWith(t)
	server := rolloutdContainer(t, aks).Image
	for _, part := range optionalParts {
		t.Run(part.component, func(t *testing.T) {
			out, _ := renderOnDisk(t, part.own)
			own := splitObjects(t, out)
			with, b := renderAKSWith(t, part.component)
			for _, p := range compositionProblems(alone, with, own) {
				t.Error(p)
			}
			for _, pod := range jobPodSpecs(b) {
				for _, c := range pod.Containers {
					if c.Image != server {
						t.Errorf("%s: container %s runs %q, not the server's image %q (set by overlays/aks)", part.component, c.Name, c.Image, server)
					}
				}
			}
			t.Logf("overlays/aks + %s: %d objects of aks unchanged, adds %v", part.component, len(alone), sortedKeys(own))
		})
	}
}

// The composition check fires: a part that rewrites the server's image (as
// the old purge overlay, built on ../mtls, did) is caught with a diff.
func TestCompositionCheckFires(t *testing.T) {
	alone, _ := renderAKSWith(t)
	with := map[string]string{}
	for k, v := range alone {
		with[k] = v
	}
	var dep string
	for k := range alone {
		if strings.Contains(k, " Deployment rolloutd/rolloutd") {
			dep = k
		}
	}
	if dep == "" {
		t.Fatal("no Deployment/rolloutd in overlays/aks")
	}
	with[dep] = regexp.MustCompile(`image: \S+`).ReplaceAllString(with[dep], "image: rolloutd.azurecr.io/rolloutd:0.1.0")
	with["batch/v1 CronJob rolloutd/rolloutd-purge"] = "kind: CronJob\n"
	problems := compositionProblems(alone, with, map[string]string{})
	if len(problems) != 2 || !strings.Contains(problems[0], "+         image: rolloutd.azurecr.io/rolloutd:0.1.0") ||
		!strings.Contains(problems[1], "not one of the part's own objects") {
		t.Fatalf("want a diff of the image and an unexpected object, got %q", problems)
	}
	t.Logf("a part that rewrites the server's image is caught:\n%s", problems[0])
}

// docComponents returns the components docs/operations.md lists in the
// overlay's components: key (section 12's yaml block), after checking that
// section 5 starts that key with the spiffe component.
func docComponents(t *testing.T) []string {
	t.Helper()
	doc := string(readRepoFile(t, opsDoc))
	parse := func(what, text string) []string {
		var k struct{ Components []string }
		if err := yaml.UnmarshalStrict([]byte(text), &k); err != nil {
			t.Fatalf("%s: %s does not parse: %v\n%s", opsDoc, what, err, text)
		}
		var out []string
		for _, c := range k.Components {
			out = append(out, strings.TrimPrefix(c, "../../"))
		}
		return out
	}
	m := regexp.MustCompile(`(?s)cat >> deploy/k8s/overlays/aks/kustomization.yaml <<'EOF'\n(.*?)\nEOF\n`).FindStringSubmatch(doc)
	if m == nil || fmt.Sprint(parse("the components section 5 appends", m[1])) != "[components/spiffe]" {
		t.Errorf("%s: section 5 should append `components:` with ../../components/spiffe to the overlay", opsDoc)
	}
	m = regexp.MustCompile("(?s)```yaml\n(components:\n.*?)```").FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("%s: no ```yaml block that lists the overlay's components:", opsDoc)
	}
	return parse("the components: list", m[1])
}

// The components docs/operations.md lists are the optional parts and the
// spiffe component: the optional parts together leave overlays/aks
// unchanged, and all of them together render and pass the spiffe checks.
func TestDocsComponentsCompose(t *testing.T) {
	listed := docComponents(t)
	own := map[string]string{}
	var optional []string
	for _, part := range optionalParts {
		if !slices.Contains(listed, part.component) {
			t.Errorf("%s does not show how to list %s", opsDoc, part.component)
		}
		optional = append(optional, part.component)
		out, _ := renderOnDisk(t, part.own)
		for k, v := range splitObjects(t, out) {
			own[k] = v
		}
	}
	if !slices.Contains(listed, "components/spiffe") {
		t.Errorf("%s does not list components/spiffe", opsDoc)
	}
	alone, _ := renderAKSWith(t)
	with, _ := renderAKSWith(t, optional...)
	for _, p := range compositionProblems(alone, with, own) {
		t.Error(p)
	}
	_, all := renderAKSWith(t, listed...)
	for _, p := range spiffeProblems(all.objects) {
		t.Errorf("overlays/aks with %v: %s", listed, p)
	}
}

// jobPodSpecs returns the pod specs of the Jobs and CronJobs of a bundle.
func jobPodSpecs(b *bundle) []*corev1.PodSpec {
	var out []*corev1.PodSpec
	for _, o := range b.objects {
		switch o := o.(type) {
		case *batchv1.Job:
			out = append(out, &o.Spec.Template.Spec)
		case *batchv1.CronJob:
			out = append(out, &o.Spec.JobTemplate.Spec.Template.Spec)
		}
	}
	return out
}
