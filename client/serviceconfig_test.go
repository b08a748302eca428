package client_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolloutd/rolloutd/client"
)

// deploy/client/service-config.json, the document clients in other
// languages load, is client.ServiceConfig: ring_hash keyed on
// client.ShardHeader, and no retryPolicy (the clients retry by reason
// themselves, and two retry layers would stack).
func TestPublishedServiceConfigMatches(t *testing.T) {
	published, err := os.ReadFile(filepath.Join("..", "deploy", "client", "service-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := json.Compact(&a, published); err != nil {
		t.Fatalf("deploy/client/service-config.json: %v", err)
	}
	if err := json.Compact(&b, []byte(client.ServiceConfig)); err != nil {
		t.Fatalf("client.ServiceConfig: %v", err)
	}
	if a.String() != b.String() {
		t.Fatalf("deploy/client/service-config.json differs from client.ServiceConfig:\n%s\n%s", a.String(), b.String())
	}
	var sc struct {
		LoadBalancingConfig []map[string]struct {
			RequestHashHeader string `json:"requestHashHeader"`
		} `json:"loadBalancingConfig"`
	}
	if err := json.Unmarshal(published, &sc); err != nil {
		t.Fatal(err)
	}
	if len(sc.LoadBalancingConfig) != 1 || sc.LoadBalancingConfig[0]["ring_hash_experimental"].RequestHashHeader != client.ShardHeader {
		t.Fatalf("the service config must select ring_hash_experimental keyed on %q: %s", client.ShardHeader, published)
	}
	for _, retry := range []string{"retryPolicy", "hedgingPolicy", "retryThrottling"} {
		if strings.Contains(a.String(), retry) {
			t.Errorf("the service config has a %s: the clients own retries", retry)
		}
	}
}
