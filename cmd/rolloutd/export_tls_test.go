package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// TestExportMutualTLS exports through a server that requires client
// certificates and authorizes by identity, with export's client TLS flags:
// an exporter granted list, get and scan exports; without its certificate
// export fails.
func TestExportMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA")
	certFile, keyFile := serverCA.Server(t, "server-1").Write(t, dir)
	clientCAFile, serverCAFile, policyFile := filepath.Join(dir, "client-ca.pem"), filepath.Join(dir, "server-ca.pem"), filepath.Join(dir, "policy.yaml")
	testpki.WriteFile(t, clientCAFile, clientCA.PEM)
	testpki.WriteFile(t, serverCAFile, serverCA.PEM)
	testpki.WriteFile(t, policyFile, []byte(`grants:
  - identities: ["spiffe://e2e/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [append]
  - identities: ["spiffe://e2e/ns/data/sa/exporter"]
    shardPrefixes: [team-a]
    verbs: [list, get, scan]
`))
	p := startBare(t, nil, "--store", filepath.Join(dir, "data"),
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCAFile, "--authz-file", policyFile)

	trainerCert := clientCA.ClientURI(t, "spiffe://e2e/ns/team-a/sa/trainer").TLS(t)
	trainer := rolloutv1.NewRolloutServiceClient(grpcClient(t, p.GRPCAddr, credentials.NewTLS(&tls.Config{
		RootCAs: serverCA.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{trainerCert}})))
	for _, sh := range []string{"team-a/run1", "team-a/run2"} {
		if _, err := appendOne(ctx10s(t), trainer, sh, "a"); err != nil {
			t.Fatal(err)
		}
	}
	exporterDir := filepath.Join(dir, "exporter")
	if err := os.Mkdir(exporterDir, 0o700); err != nil {
		t.Fatal(err)
	}
	exCert, exKey := clientCA.ClientURI(t, "spiffe://e2e/ns/data/sa/exporter").Write(t, exporterDir)
	out := t.TempDir()
	args := []string{"--server", p.GRPCAddr, "--tls-ca", serverCAFile, "--tls-server-name", "localhost", "--prefix", "team-a/", "--out", out}

	if _, errOut, err := runExportCmd(t, nil, args...); err == nil {
		t.Errorf("export without a client certificate succeeded:\n%s", errOut)
	}
	s := exportJSON(t, nil, append(args, "--tls-cert", exCert, "--tls-key", exKey)...)
	if s.Records != 2 || len(s.Shards) != 2 || s.Failed != 0 {
		t.Fatalf("export under mTLS: %+v", s)
	}
	for _, r := range s.Shards {
		if !strings.HasPrefix(r.Shard, "team-a/") || r.Status != "exported" {
			t.Errorf("shard %+v", r)
		}
	}
}
