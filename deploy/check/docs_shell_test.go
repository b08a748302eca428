package check

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// shellBlocks returns the ```sh blocks of a document.
func shellBlocks(doc string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(doc, -1) {
		out = append(out, m[1])
	}
	return out
}

// shellProblems checks the shell commands of a document: every $VAR is
// exported by it or by one of the documents it builds on (known), no
// container is created through the data plane (operations.md section 2
// gives the operator no data-plane role on purpose), and no private key is
// written to a path inside the checkout.
func shellProblems(doc string, known []string) []string {
	var out []string
	defined := slices.Clone(known)
	for _, b := range shellBlocks(doc) {
		for _, line := range strings.Split(b, "\n") {
			if m := regexp.MustCompile(`^export ([A-Z_]+)=`).FindStringSubmatch(line); m != nil {
				defined = append(defined, m[1])
			}
			for _, v := range regexp.MustCompile(`\$\{?([A-Z_]+)\}?`).FindAllStringSubmatch(line, -1) {
				if !slices.Contains(defined, v[1]) && v[1] != "HOME" {
					out = append(out, "$"+v[1]+" is used before any `export "+v[1]+"=`: "+line)
				}
			}
			if strings.Contains(line, "az storage container create") || strings.Contains(line, "--auth-mode login") {
				out = append(out, "a data-plane container command needs a Storage Blob Data role the operator does not have (use az storage container-rm create): "+line)
			}
			for _, m := range regexp.MustCompile(`>\s*(\S+\.key)\b`).FindAllStringSubmatch(line, -1) {
				if p := m[1]; !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "$") && !strings.HasPrefix(p, "~") {
					out = append(out, "a private key is written inside the checkout ("+p+"): "+line)
				}
			}
		}
	}
	return out
}

// exportedIn returns the variables a document exports in its ```sh blocks.
func exportedIn(doc string) []string {
	var out []string
	for _, b := range shellBlocks(doc) {
		for _, m := range regexp.MustCompile(`(?m)^export ([A-Z_]+)=`).FindAllStringSubmatch(b, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// The shell commands of operations.md and export.md (which builds on
// operations.md's names) define every variable they use, create containers
// through Azure Resource Manager only, and keep private keys out of the
// checkout.
func TestDocsShellCommands(t *testing.T) {
	ops := string(readRepoFile(t, opsDoc))
	for _, p := range shellProblems(ops, nil) {
		t.Errorf("%s: %s", opsDoc, p)
	}
	for _, p := range shellProblems(string(readRepoFile(t, "docs/export.md")), exportedIn(ops)) {
		t.Errorf("docs/export.md: %s", p)
	}
}

// Each rule of shellProblems fires.
func TestDocsShellChecksFire(t *testing.T) {
	doc := "```sh\n" + `az storage container create --name rollout-exports --account-name $ACCOUNT --auth-mode login
kubectl get secret x -o jsonpath='{.data.tls\.key}' | base64 -d > trainer/tls.key
` + "```\n"
	got := strings.Join(shellProblems(doc, nil), "\n")
	for _, want := range []string{"$ACCOUNT is used before", "data-plane container command", "inside the checkout (trainer/tls.key)"} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem %q in:\n%s", want, got)
		}
	}
}

// The objects table of operations.md names the key of the policy ConfigMap
// that --authz-file reads, not the overlay's source file.
func TestDocsObjectsTableNamesThePolicyKey(t *testing.T) {
	_, b := renderOnDisk(t, "overlays/aks")
	v, _, ok := b.flagValue(rolloutdContainer(t, b), "authz-file")
	if !ok {
		t.Fatal("overlays/aks sets no --authz-file")
	}
	key := v[strings.LastIndex(v, "/")+1:]
	if cm := b.configMap("rolloutd-authz"); cm == nil || cm.Data[key] == "" {
		t.Fatalf("ConfigMap rolloutd-authz has no key %s", key)
	}
	row := regexp.MustCompile("(?m)^\\| ConfigMap \\| `rolloutd-authz` \\|.*$").FindString(string(readRepoFile(t, opsDoc)))
	if !strings.Contains(row, "key `"+key+"`") {
		t.Errorf("%s: the objects table should name the ConfigMap's key `%s` (what --authz-file reads): %s", opsDoc, key, row)
	}
}
