package authz

import (
	"os"
	"path/filepath"
	"testing"
)

// The example policy of the mTLS deploy overlay is valid, and grants the
// overlay's example client certificate (spiffe://cluster.local/ns/team-a/sa/trainer)
// team-a's shards and nothing else.
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
	const trainer = "spiffe://cluster.local/ns/team-a/sa/trainer"
	if err := a.Authorize(trainer, Append, "team-a/run1"); err != nil {
		t.Error(err)
	}
	if err := a.Authorize(trainer, Append, "team-ab/run1"); err == nil {
		t.Error("the example trainer may append to team-ab")
	}
}
