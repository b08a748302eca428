package check

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

const opsDoc = "docs/operations.md"

// overlayHeredoc matches each file of the overlay docs/operations.md
// writes: cat > deploy/k8s/overlays/aks/FILE <<EOF (expanded by the shell)
// or <<'EOF' (not expanded).
var overlayHeredoc = regexp.MustCompile(`(?s)cat > (deploy/k8s/overlays/aks/[A-Za-z0-9._-]+) <<('?)EOF'?\n(.*?)\nEOF\n`)

// docValues stand in for the shell variables of docs/operations.md.
var docValues = map[string]string{
	"ACR":       "contosoacr",
	"TAG":       "1.2.3",
	"CLIENT_ID": "0b7c4f0e-52f5-4c1a-9a0e-3d2f6b8c9d10",
	"STORAGE":   "contosorollouts",
	"CONTAINER": "rollouts",
}

// placeholderClientID is the client id the committed overlays/aks holds:
// the doc's example names come from its export lines, but CLIENT_ID comes
// from az.
const placeholderClientID = "00000000-0000-0000-0000-000000000000"

// docOverlayFiles returns the files the overlay heredocs of
// docs/operations.md write, with the shell's expansion of values.
func docOverlayFiles(t *testing.T, doc string, values map[string]string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, m := range overlayHeredoc.FindAllStringSubmatch(doc, -1) {
		path, quoted, body := m[1], m[2] != "", m[3]
		if !quoted {
			for _, v := range regexp.MustCompile(`\$\{?([A-Z_]+)\}?`).FindAllStringSubmatch(body, -1) {
				if _, ok := values[v[1]]; !ok {
					t.Errorf("the overlay uses $%s, which the test does not know", v[1])
				}
				if !regexp.MustCompile(`(?m)^export ` + v[1] + `=`).MatchString(doc) {
					t.Errorf("the overlay uses $%s, but %s never exports it", v[1], opsDoc)
				}
			}
			body = os.Expand(body, func(k string) string { return values[k] })
		}
		files[path] = body
	}
	if _, ok := files["deploy/k8s/overlays/aks/kustomization.yaml"]; !ok {
		t.Fatalf("%s: no `cat > deploy/k8s/overlays/aks/kustomization.yaml <<EOF` heredoc", opsDoc)
	}
	return files
}

// renderDocOverlay writes the overlay of docs/operations.md, with the
// shell's expansion of docValues, over a copy of deploy/k8s in memory,
// and renders it with krusty.
func renderDocOverlay(t *testing.T) (string, *bundle) {
	t.Helper()
	files := docOverlayFiles(t, string(readRepoFile(t, opsDoc)), docValues)
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
	for path, body := range files {
		if err := fsys.WriteFile("/"+path, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	kustomization := files["deploy/k8s/overlays/aks/kustomization.yaml"]
	_, objs, err := render(fsys, "/deploy/k8s/overlays/aks")
	if err != nil {
		t.Fatalf("the overlay of %s does not render: %v\n%s", opsDoc, err, kustomization)
	}
	return kustomization, newBundle(objs)
}

// The committed overlays/aks is what section 5 of docs/operations.md
// writes, with the doc's example names (its export lines) and a
// placeholder client id: comments aside, the same text, file by file.
func TestDocsOverlayIsTheCommittedOverlay(t *testing.T) {
	doc := string(readRepoFile(t, opsDoc))
	values := map[string]string{"CLIENT_ID": placeholderClientID}
	for _, m := range regexp.MustCompile(`(?m)^export ([A-Z_]+)=(\S+)$`).FindAllStringSubmatch(doc, -1) {
		if _, ok := values[m[1]]; !ok {
			values[m[1]] = m[2]
		}
	}
	files := docOverlayFiles(t, doc, values)
	committed, err := filepath.Glob(filepath.Join(k8sDir(), "overlays", "aks", "*"))
	if err != nil || len(committed) == 0 {
		t.Fatalf("no deploy/k8s/overlays/aks: %v", err)
	}
	for _, path := range committed {
		rel, _ := filepath.Rel(repoRoot, path)
		body, ok := files[filepath.ToSlash(rel)]
		if !ok {
			t.Errorf("%s does not write %s", opsDoc, rel)
			continue
		}
		if got, want := withoutComments(body), withoutComments(string(readRepoFile(t, rel))); got != want {
			t.Errorf("%s writes %s as\n%s\nthe repository holds\n%s", opsDoc, rel, got, want)
		}
	}
	if len(files) != len(committed) {
		t.Errorf("%s writes %d files of overlays/aks, the repository holds %d", opsDoc, len(files), len(committed))
	}
}

// withoutComments drops the blank lines and the lines that are only a YAML
// comment.
func withoutComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if tl := strings.TrimSpace(l); tl != "" && !strings.HasPrefix(tl, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDocsOverlayRendersAndPassesTheRules renders the overlay that
// docs/operations.md tells operators to write, and checks that it passes
// every rule and carries their values.
func TestDocsOverlayRendersAndPassesTheRules(t *testing.T) {
	_, b := renderDocOverlay(t)
	checkMTLSBundle(t, newMTLSBundle(b))
	c := rolloutdContainer(t, b)
	v := docValues
	checks := []struct{ what, got, want string }{
		{"image", c.Image, v["ACR"] + ".azurecr.io/rolloutd:" + v["TAG"]},
		{"client-id annotation", b.serviceAccounts[0].Annotations[wiClientIDAnnotation], v["CLIENT_ID"]},
		{"ROLLOUTD_STORE", b.configMap("rolloutd-config").Data["ROLLOUTD_STORE"], "azblob://" + v["CONTAINER"]},
		{"AZURE_STORAGE_ACCOUNT_URL", b.configMap("rolloutd-config").Data["AZURE_STORAGE_ACCOUNT_URL"], "https://" + v["STORAGE"] + ".blob.core.windows.net/"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("docs overlay: %s = %q, want %q", ck.what, ck.got, ck.want)
		}
	}
	t.Logf("the overlay of %s renders %d objects and passes the rules; image %s, client-id %s, store %s",
		opsDoc, len(b.objects), c.Image, checks[1].got, checks[2].got)
}

// TestDocsCommandsMatchManifests checks the names, ports and numbers that
// docs/operations.md uses against the rendered manifests.
func TestDocsCommandsMatchManifests(t *testing.T) {
	doc := string(readRepoFile(t, opsDoc))
	_, base := renderOnDisk(t, "base")
	_, dev := renderOnDisk(t, "overlays/dev")
	d := base.deployment(appName)
	c := rolloutdContainer(t, base)

	// The federated credential's subject is the rendered service account.
	sa := base.serviceAccounts[0]
	subject := fmt.Sprintf("--subject system:serviceaccount:%s:%s", sa.Namespace, sa.Name)
	if !strings.Contains(doc, subject) {
		t.Errorf("%s lacks %q", opsDoc, subject)
	}

	// Every kubectl namespace and object reference exists.
	objects := map[string]bool{}
	for _, b := range []*bundle{base, dev} {
		for _, o := range b.objects {
			objects[strings.ToLower(describe(o))] = true
		}
	}
	kinds := map[string]string{"svc": "service", "deploy": "deployment", "hpa": "horizontalpodautoscaler"}
	refs, namespaces, forwards := 0, 0, 0
	for _, line := range strings.Split(doc, "\n") {
		if !strings.Contains(line, "kubectl ") {
			continue
		}
		for _, m := range regexp.MustCompile(`(?:-n|--namespace)[ =]([a-z0-9-]+)`).FindAllStringSubmatch(line, -1) {
			namespaces++
			if m[1] != d.Namespace {
				t.Errorf("%s: namespace %q, the manifests use %q: %s", opsDoc, m[1], d.Namespace, line)
			}
		}
		for _, m := range regexp.MustCompile("(?:^|\\s)(svc|deploy|hpa)/([a-z0-9-]+)(?:\\s|$|`)").FindAllStringSubmatch(line, -1) {
			refs++
			if !objects[kinds[m[1]]+"/"+m[2]] {
				t.Errorf("%s: %s/%s is not in the manifests: %s", opsDoc, m[1], m[2], line)
			}
		}
		for _, m := range regexp.MustCompile(`\bpatch (hpa) ([a-z0-9-]+)`).FindAllStringSubmatch(line, -1) {
			refs++
			if !objects[kinds[m[1]]+"/"+m[2]] {
				t.Errorf("%s: %s %s is not in the manifests: %s", opsDoc, m[1], m[2], line)
			}
		}
		// port-forward svc/NAME LOCAL:REMOTE...: each remote port is a port
		// of that Service.
		if m := regexp.MustCompile(`port-forward svc/([a-z0-9-]+)((?: \d+:\d+)+)`).FindStringSubmatch(line); m != nil {
			var svc *corev1.Service
			for _, s := range base.services {
				if s.Name == m[1] {
					svc = s
				}
			}
			if svc == nil {
				t.Errorf("%s: port-forward to unknown Service %s", opsDoc, m[1])
				continue
			}
			forwards++
			for _, pair := range strings.Fields(m[2]) {
				remote := pair[strings.Index(pair, ":")+1:]
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return fmt.Sprint(p.Port) == remote }) {
					t.Errorf("%s: port-forward %s: Service %s has no port %s", opsDoc, pair, svc.Name, remote)
				}
			}
		}
	}

	// The numbers the rolling-update section quotes.
	for flag, want := range map[string]string{"drain-delay": "", "shutdown-timeout": ""} {
		v, _, _ := base.flagValue(c, flag)
		want = fmt.Sprintf("`--%s` (%s)", flag, v)
		if !strings.Contains(doc, want) {
			t.Errorf("%s should quote %s, as the Deployment sets it", opsDoc, want)
		}
	}
	grace := fmt.Sprintf("`terminationGracePeriodSeconds` (%ds)", *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	if !strings.Contains(doc, grace) {
		t.Errorf("%s should quote %s", opsDoc, grace)
	}

	// The dev overlay's Secret: the name and key the Deployment reads, and
	// a connection string that reaches the in-cluster Azurite Service.
	conn := docConnectionString(t, doc, dev)
	if refs == 0 || namespaces == 0 || forwards == 0 {
		t.Errorf("found %d object references, %d namespaces and %d port-forwards in kubectl lines; the parsing is off", refs, namespaces, forwards)
	}
	t.Logf("%s: subject %q; %d kubectl object references, %d namespaces, %d port-forwards; timeouts; the dev Secret (%s...) match the manifests",
		opsDoc, subject, refs, namespaces, forwards, conn[:40])
}

// docConnectionString returns the connection string of the dev Secret that
// docs/operations.md creates, after checking the Secret's name and key
// against the dev overlay and its BlobEndpoint against the Azurite Service.
func docConnectionString(t *testing.T, doc string, dev *bundle) string {
	t.Helper()
	m := regexp.MustCompile(`create secret generic ([a-z0-9-]+) --from-literal=([a-z0-9-]+)='([^']+)'`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("%s: no `kubectl create secret generic NAME --from-literal=KEY='...'`", opsDoc)
	}
	var ref *corev1.SecretKeySelector
	for _, e := range rolloutdContainer(t, dev).Env {
		if e.Name == "AZURE_STORAGE_CONNECTION_STRING" && e.ValueFrom != nil {
			ref = e.ValueFrom.SecretKeyRef
		}
	}
	if ref == nil || ref.Name != m[1] || ref.Key != m[2] {
		t.Errorf("%s creates Secret %s key %s; the dev overlay reads %+v", opsDoc, m[1], m[2], ref)
	}
	var az *corev1.Service
	for _, s := range dev.services {
		if s.Name == "azurite" {
			az = s
		}
	}
	if az == nil || len(az.Spec.Ports) != 1 {
		t.Fatal("the dev overlay has no azurite Service with one port")
	}
	endpoint := fmt.Sprintf("BlobEndpoint=http://%s.%s.svc.cluster.local:%d/devstoreaccount1;", az.Name, az.Namespace, az.Spec.Ports[0].Port)
	if !strings.Contains(m[3], endpoint) {
		t.Errorf("the dev connection string should contain %s: %s", endpoint, m[3])
	}
	return m[3]
}

// consoleCommand is one `$ command` of a console block and what it printed.
type consoleCommand struct {
	cmd, output string
}

func consoleCommands(doc string) []consoleCommand {
	var out []consoleCommand
	for _, block := range regexp.MustCompile("(?s)```console\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		for _, part := range strings.Split("\n"+block[1], "\n$ ")[1:] {
			cmd, output, _ := strings.Cut(part, "\n")
			out = append(out, consoleCommand{cmd: cmd, output: strings.TrimSpace(output)})
		}
	}
	return out
}

// shellWords splits a command line with single-quoted words.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			inQuote, inWord = !inQuote, true
		case r == ' ' && !inQuote:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// docGrpcurlCall is one grpcurl invocation of the docs that calls a
// RolloutService or Health method.
type docGrpcurlCall struct {
	method  string // e.g. rollout.v1.RolloutService/Append
	payload string // -d, or ""
	output  string // what the doc shows
}

func docGrpcurlCalls(t *testing.T) (calls []docGrpcurlCall, listOutput string) {
	t.Helper()
	for _, cc := range consoleCommands(string(readRepoFile(t, opsDoc))) {
		w := shellWords(cc.cmd)
		if len(w) == 0 || w[0] != "grpcurl" {
			continue
		}
		if strings.HasPrefix(cc.output, "ERROR:") || strings.HasPrefix(cc.output, "Failed to") {
			// A refusal (no grant, no client certificate): the replay runs
			// the base's plaintext server, which refuses nothing.
			continue
		}
		if w[len(w)-1] == "list" {
			listOutput = cc.output
			continue
		}
		call := docGrpcurlCall{method: w[len(w)-1], output: cc.output}
		if i := slices.Index(w, "-d"); i >= 0 && i+1 < len(w) {
			call.payload = w[i+1]
		}
		calls = append(calls, call)
	}
	if len(calls) == 0 || listOutput == "" {
		t.Fatalf("%s shows no grpcurl list and method calls", opsDoc)
	}
	return calls, listOutput
}

// jsonEqualIgnoring compares two JSON documents, ignoring the named keys
// wherever they appear (server-assigned timestamps).
func jsonEqualIgnoring(a, b string, ignore ...string) (bool, error) {
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		return false, err
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		return false, err
	}
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range ignore {
				delete(v, k)
			}
			for _, e := range v {
				strip(e)
			}
		case []any:
			for _, e := range v {
				strip(e)
			}
		}
	}
	strip(x)
	strip(y)
	return reflect.DeepEqual(x, y), nil
}

// newRequest makes the request message of a RolloutService method from a
// grpcurl -d payload, rejecting unknown fields as grpcurl does.
func newRequest(method, payload string) (proto.Message, error) {
	var req proto.Message
	switch method {
	case "rollout.v1.RolloutService/Append":
		req = &rolloutv1.AppendRequest{}
	case "rollout.v1.RolloutService/Get":
		req = &rolloutv1.GetRequest{}
	default:
		return nil, fmt.Errorf("unknown method %s", method)
	}
	return req, protojson.Unmarshal([]byte(payload), req)
}
