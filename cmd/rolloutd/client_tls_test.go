package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

const goClientPolicy = `grants:
  - identities: ["spiffe://client-test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [append, get, scan]
`

// The Go client over mTLS from PEM files, as docs/security.md sets the
// server up (here, beside the binary it needs, not in client): a granted
// identity appends, another shard is PERMISSION_DENIED, and a client
// without a certificate does not get past the handshake.
func TestGoClientMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA")
	certFile, keyFile := serverCA.Server(t, "server-1").Write(t, dir)
	serverCAFile, clientCAFile, policyFile := filepath.Join(dir, "server-ca.pem"), filepath.Join(dir, "client-ca.pem"), filepath.Join(dir, "policy.yaml")
	testpki.WriteFile(t, serverCAFile, serverCA.PEM)
	testpki.WriteFile(t, clientCAFile, clientCA.PEM)
	testpki.WriteFile(t, policyFile, []byte(goClientPolicy))
	p := rolloutdproc.Start(t, binary, rolloutdproc.Options{
		Args: []string{"--store", filepath.Join(dir, "data"),
			"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCAFile, "--authz-file", policyFile},
		DropEnv: []string{"AZURE_", "ROLLOUTD_"}, Bare: true, StartTimeout: 30 * time.Second,
	})
	clientDir := t.TempDir()
	clientCert, clientKey := clientCA.ClientURI(t, "spiffe://client-test/ns/team-a/sa/trainer").Write(t, clientDir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	records := []*rolloutv1.Record{{Id: "r-1", Content: "x"}}

	trainer := goClient(t, p.GRPCAddr, client.WithTLS(client.TLSConfig{
		CAFile: serverCAFile, CertFile: clientCert, KeyFile: clientKey, ServerName: "localhost"}))
	if _, err := trainer.Append(ctx, "team-a/run1", records); err != nil {
		t.Fatalf("granted append over mTLS: %v", err)
	}
	if _, err := trainer.Append(ctx, "team-b/run1", records); !errors.Is(err, client.ErrPermissionDenied) {
		t.Errorf("append to another team's shard: %v, want permission denied", err)
	}
	noCert := goClient(t, p.GRPCAddr, client.WithTLS(client.TLSConfig{CAFile: serverCAFile, ServerName: "localhost"}),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if _, err := noCert.Get(ctx, "team-a/run1", "r-1"); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Get without a client certificate: %v, want unavailable (the handshake fails)", err)
	}
	if _, err := client.New(p.GRPCAddr, client.WithTLS(client.TLSConfig{CertFile: clientCert})); err == nil {
		t.Error("New with a certificate and no key: no error")
	}
}

// goClient connects the Go client to addr; it is closed when the test ends.
func goClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
