package authz

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// The example policy of the mTLS deploy overlay is valid, and grants the
// overlay's example client certificate (spiffe://cluster.local/ns/team-a/sa/trainer)
// team-a's shards and nothing else, and the eval reader reads the evals:
// its untagged identities still mean URI SANs.
func TestDeployOverlayPolicy(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "k8s", "overlays", "mtls", "authz-policy.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatalf("deploy/k8s/overlays/mtls/authz-policy.json: %v", err)
	}
	a := NewStatic(p)
	ca := testpki.NewCA(t, "CA")
	trainer := Identity(ca.ClientURI(t, "spiffe://cluster.local/ns/team-a/sa/trainer").Cert)
	reader := Identity(ca.ClientURI(t, "spiffe://cluster.local/ns/eval/sa/reader").Cert)
	for _, verb := range []Verb{Append, Get, Scan} {
		if err := a.Authorize(trainer, verb, "team-a/run1"); err != nil {
			t.Error(err)
		}
		if err := a.Authorize(trainer, verb, "team-ab/run1"); err == nil {
			t.Errorf("the example trainer may %s team-ab", verb)
		}
	}
	// The trainer commits and resets its team's consumers, and only
	// theirs.
	for prefix, ok := range map[string]bool{"team-a": true, "team-a/exp": true, "team-b": false, "team-ab": false, "": false} {
		if err := a.AuthorizePrefix(trainer, Consume, prefix); (err == nil) != ok {
			t.Errorf("the example trainer consuming %q: %v, want allowed %t", prefix, err, ok)
		}
	}
	if err := a.AuthorizePrefix(reader, Consume, "team-a/eval"); err == nil {
		t.Error("the example reader may commit consumers of team-a/eval")
	}
	// The trainer lists nothing and deletes nothing: delete is granted
	// by name only, to the purge CronJob's identity.
	for _, verb := range []Verb{List, Describe, Delete} {
		if err := a.Authorize(trainer, verb, "team-a/run1"); err == nil {
			t.Errorf("the example trainer may %s team-a/run1", verb)
		}
	}
	purge := Identity(ca.ClientURI(t, "spiffe://cluster.local/ns/rolloutd/sa/rolloutd-purge").Cert)
	for _, verb := range []Verb{List, Describe, Delete} {
		if err := a.Authorize(purge, verb, "team-a/run1"); err != nil {
			t.Error(err)
		}
	}
	for _, verb := range []Verb{Append, Get, Scan} {
		if err := a.Authorize(purge, verb, "team-a/run1"); err == nil {
			t.Errorf("the purge identity may %s team-a/run1", verb)
		}
	}
	for _, s := range []string{"team-a/eval/x", "team-b/eval"} {
		if err := a.Authorize(reader, Scan, s); err != nil {
			t.Error(err)
		}
		if err := a.Authorize(reader, Append, s); err == nil {
			t.Errorf("the example reader may append to %s", s)
		}
	}
	// A certificate whose common name reads like the trainer's SPIFFE ID,
	// without the URI SAN, is not the trainer.
	impostor := Identity(ca.ClientCN(t, "spiffe://cluster.local/ns/team-a/sa/trainer").Cert)
	if err := a.Authorize(impostor, Get, "team-a/run1"); err == nil {
		t.Errorf("%s gets the trainer's grants", impostor)
	}
}
