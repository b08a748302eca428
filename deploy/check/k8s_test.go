package check

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// scheme knows every kind deploy/k8s may contain; any other kind fails to
// decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		networkingv1.AddToScheme, autoscalingv2.AddToScheme, batchv1.AddToScheme,
	} {
		utilruntime.Must(add(s))
	}
	return s
}()

// strictYAML is apimachinery's serializer in strict mode: unknown and
// duplicate fields are errors.
var strictYAML = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// decodeManifests strictly decodes every YAML document in data into its
// k8s.io/api type. Empty documents (only comments) are skipped.
func decodeManifests(data []byte) ([]runtime.Object, error) {
	var objs []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var probe any
		if err := yaml.Unmarshal(doc, &probe); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if probe == nil {
			continue
		}
		obj, gvk, err := strictYAML.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if gvk.Kind == "" || gvk.Version == "" {
			return nil, fmt.Errorf("document %d: no apiVersion or kind", i)
		}
		objs = append(objs, obj)
	}
}

// decodeKustomization strictly decodes a kustomization.yaml into
// kustomize's own type: a Kustomization, or a Component (the optional
// parts that an overlay lists under components:).
func decodeKustomization(data []byte) (*types.Kustomization, error) {
	var k types.Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		return nil, err
	}
	okKustomization := k.Kind == types.KustomizationKind && k.APIVersion == types.KustomizationVersion
	okComponent := k.Kind == types.ComponentKind && k.APIVersion == types.ComponentVersion
	if !okKustomization && !okComponent {
		return nil, fmt.Errorf("want apiVersion %s and kind %s (or %s and %s), got %q %q",
			types.KustomizationVersion, types.KustomizationKind, types.ComponentVersion, types.ComponentKind, k.APIVersion, k.Kind)
	}
	return &k, nil
}

// k8sDir is deploy/k8s.
func k8sDir() string { return filepath.Join(repoRoot, "deploy", "k8s") }

// manifestFiles lists every YAML file under deploy/k8s.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(k8sDir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no manifests under deploy/k8s")
	}
	return files
}

// TestManifestsDecodeStrictly decodes every file under deploy/k8s: each
// kustomization.yaml into kustomize's Kustomization, every other file
// (resources and patches) into k8s.io/api types, all strictly.
func TestManifestsDecodeStrictly(t *testing.T) {
	for _, path := range manifestFiles(t) {
		rel, _ := filepath.Rel(repoRoot, path)
		t.Run(rel, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(path) == "kustomization.yaml" {
				if _, err := decodeKustomization(data); err != nil {
					t.Fatalf("%s: %v", rel, err)
				}
				return
			}
			objs, err := decodeManifests(data)
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			if len(objs) == 0 {
				t.Fatalf("%s: no objects", rel)
			}
			for _, o := range objs {
				t.Logf("%s: %s", rel, o.GetObjectKind().GroupVersionKind().Kind)
			}
		})
	}
}

// TestMisspelledFieldFails is the negative fixture: a Deployment whose
// fields are misspelled must not decode.
func TestMisspelledFieldFails(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "misspelled-deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = decodeManifests(data)
	if err == nil {
		t.Fatal("testdata/misspelled-deployment.yaml decoded without error; strict decoding is not on")
	}
	t.Logf("testdata/misspelled-deployment.yaml fails as it should:\n%v", err)
	for _, field := range []string{"terminationGracePeriodSecond", "readinesProbe"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("the error does not name the misspelled field %q", field)
		}
	}
	if !runtime.IsStrictDecodingError(unwrapAll(err)) {
		t.Errorf("want a strict decoding error, got %T", unwrapAll(err))
	}

	// A misspelled kustomization field fails too.
	_, err = decodeKustomization([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource:\n  - deployment.yaml\n"))
	if err == nil || !strings.Contains(err.Error(), "resource") {
		t.Fatalf("a kustomization with 'resource:' decoded: %v", err)
	}
	t.Logf("a kustomization.yaml with 'resource:' fails as it should: %v", err)
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// render builds the kustomization in dir (on fsys) with krusty, in-process,
// and strictly decodes the result.
func render(fsys filesys.FileSystem, dir string) ([]byte, []runtime.Object, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(fsys, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, nil, err
	}
	objs, err := decodeManifests(out)
	if err != nil {
		return out, nil, fmt.Errorf("rendered %s: %w", dir, err)
	}
	return out, objs, nil
}

// renderOnDisk renders a kustomization under deploy/k8s.
func renderOnDisk(t *testing.T, rel string) ([]byte, *bundle) {
	t.Helper()
	out, objs, err := render(filesys.MakeFsOnDisk(), filepath.Join(k8sDir(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return out, newBundle(objs)
}

func rolloutdContainer(t *testing.T, b *bundle) *corev1.Container {
	t.Helper()
	d := b.deployment(appName)
	if d == nil {
		t.Fatal("no Deployment/rolloutd")
	}
	c := container(&d.Spec.Template.Spec, containerName)
	if c == nil {
		t.Fatal("no container rolloutd")
	}
	return c
}

// TestKustomizeRenders renders the base and the dev overlay with krusty and
// checks that each holds what the issue asks for.
func TestKustomizeRenders(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		kinds map[string]int
		check func(t *testing.T, b *bundle)
	}{
		{"base", map[string]int{"Namespace": 1, "ServiceAccount": 1, "ConfigMap": 1, "Deployment": 1,
			"Service": 2, "PodDisruptionBudget": 1, "NetworkPolicy": 1, "HorizontalPodAutoscaler": 1},
			func(t *testing.T, b *bundle) {
				if img := rolloutdContainer(t, b).Image; img != "rolloutd.azurecr.io/rolloutd:0.1.0" {
					t.Errorf("image %q, want the base's rolloutd.azurecr.io/rolloutd:0.1.0", img)
				}
			}},
		{"overlays/dev", map[string]int{"Namespace": 1, "ServiceAccount": 1, "ConfigMap": 1, "Deployment": 2,
			"Service": 3, "PodDisruptionBudget": 1, "NetworkPolicy": 1, "HorizontalPodAutoscaler": 1},
			func(t *testing.T, b *bundle) {
				c := rolloutdContainer(t, b)
				if c.Image != "rolloutd:dev" {
					t.Errorf("image %q, want rolloutd:dev (the overlay's)", c.Image)
				}
				if _, ok := b.envValue(c, "AZURE_STORAGE_ACCOUNT_URL"); ok {
					t.Error("the dev overlay still sets AZURE_STORAGE_ACCOUNT_URL")
				}
				var ref *corev1.SecretKeySelector
				for _, e := range c.Env {
					if e.Name == "AZURE_STORAGE_CONNECTION_STRING" && e.ValueFrom != nil {
						ref = e.ValueFrom.SecretKeyRef
					}
				}
				if ref == nil || ref.Name != "rolloutd-azurite" || ref.Key != "connection-string" {
					t.Errorf("AZURE_STORAGE_CONNECTION_STRING should come from Secret rolloutd-azurite, key connection-string; got %+v", ref)
				}
			}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			out, b := renderOnDisk(t, tc.dir)
			got := map[string]int{}
			for _, o := range b.objects {
				got[o.GetObjectKind().GroupVersionKind().Kind]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.kinds) {
				t.Errorf("rendered kinds %v, want %v", got, tc.kinds)
			}
			for _, o := range b.objects {
				if _, cluster := o.(*corev1.Namespace); cluster {
					continue
				}
				if ns := namespaceOf(o); ns != "rolloutd" {
					t.Errorf("%s is in namespace %q, want rolloutd", describe(o), ns)
				}
			}
			tc.check(t, b)
			t.Logf("kustomize build deploy/k8s/%s: %d objects, %d bytes of YAML", tc.dir, len(b.objects), len(out))
		})
	}
}
