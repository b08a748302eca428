package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// startBare starts rolloutd with args and env, on free loopback ports, and
// waits for its listener lines; it checks no health (the caller knows which
// transport to use). The inherited environment loses every AZURE_* variable,
// so only env supplies credentials.
func startBare(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return rolloutdproc.Start(t, binary, rolloutdproc.Options{
		Args: args, Env: env, DropEnv: []string{"AZURE_", envPrefix}, Bare: true, StartTimeout: 30 * time.Second,
	})
}

func grpcClient(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctx10s(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

const e2ePolicy = `grants:
  - identities: ["spiffe://e2e/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [append, get, scan]
`

// The real binary under mTLS with a policy: a plaintext health-only
// listener for probes, TLS metrics, default-deny authorization, and TLS
// material and policy reloaded from disk while it runs.
func TestBinaryMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, clientCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA")
	certFile, keyFile := serverCA.Server(t, "server-1").Write(t, dir)
	caFile, policyFile := filepath.Join(dir, "client-ca.pem"), filepath.Join(dir, "policy.yaml")
	testpki.WriteFile(t, caFile, clientCA.PEM)
	testpki.WriteFile(t, policyFile, []byte(e2ePolicy))

	p := startBare(t, nil, "--store", filepath.Join(dir, "data"),
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile, "--authz-file", policyFile,
		"--health-listen", "127.0.0.1:0", "--metrics-tls", "tls", "--reload-interval", "50ms")
	healthAddr := p.LogAddr("serving health")

	// Probes: plaintext health on the health port, no certificate.
	resp, err := healthpb.NewHealthClient(grpcClient(t, healthAddr, insecure.NewCredentials())).Check(ctx10s(t), &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on --health-listen: %v %v", resp, err)
	}
	// The gRPC port refuses plaintext.
	if _, err := healthpb.NewHealthClient(grpcClient(t, p.GRPCAddr, insecure.NewCredentials())).Check(ctx10s(t), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext on the mTLS port: %v", err)
	}

	clientCreds := func(leaf *testpki.Leaf) credentials.TransportCredentials {
		c := leaf.TLS(t)
		return credentials.NewTLS(&tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{c}})
	}
	trainer := rolloutv1.NewRolloutServiceClient(grpcClient(t, p.GRPCAddr, clientCreds(clientCA.ClientURI(t, "spiffe://e2e/ns/team-a/sa/trainer"))))
	other := rolloutv1.NewRolloutServiceClient(grpcClient(t, p.GRPCAddr, clientCreds(clientCA.ClientURI(t, "spiffe://e2e/ns/team-b/sa/trainer"))))

	if _, err := appendOne(ctx10s(t), trainer, "team-a/run1", "a"); err != nil {
		t.Fatalf("granted append: %v", err)
	}
	if _, err := appendOne(ctx10s(t), trainer, "team-ab/run1", "a"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("append to team-ab by team-a's trainer: %v", err)
	}
	_, err = appendOne(ctx10s(t), other, "team-a/run1", "b")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "spiffe://e2e/ns/team-b/sa/trainer") || !strings.Contains(err.Error(), "append") {
		t.Errorf("append by an identity without a grant: %v", err)
	}

	// Metrics over TLS, trusted through the server CA; plaintext HTTP is
	// turned away.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost"}}}
	mresp, err := hc.Get("https://" + p.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, m := range []string{`rolloutd_rpc_denied_total{verb="append"} 2`, "rolloutd_tls_certificate_expiry_timestamp_seconds", "rolloutd_authz_policy_reload_failures_total 0"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics over TLS lacks %q", m)
		}
	}
	if presp, err := http.Get("http://" + p.MetricsAddr + "/metrics"); err == nil {
		presp.Body.Close()
		if presp.StatusCode != http.StatusBadRequest {
			t.Errorf("plaintext /metrics on the TLS metrics port: %s", presp.Status)
		}
	}

	// Rotation: a new server certificate on disk reaches new connections.
	serverCA.Server(t, "server-2").Write(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pr peer.Peer
		c := rolloutv1.NewRolloutServiceClient(grpcClient(t, p.GRPCAddr, clientCreds(clientCA.ClientURI(t, "spiffe://e2e/ns/team-a/sa/trainer"))))
		_, err := c.Get(ctx10s(t), &rolloutv1.GetRequest{Shard: "team-a/run1", Id: "a"}, grpc.Peer(&pr))
		if err != nil {
			t.Fatal(err)
		}
		if cn := pr.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].Subject.CommonName; cn == "server-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated server certificate was not served")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A broken policy is rejected and logged; the old one stays.
	testpki.WriteFile(t, policyFile, []byte(strings.Replace(e2ePolicy, "verbs:", "verb:", 1)))
	p.WaitLog(`config reload: rejected the changed files`)
	if _, err := appendOne(ctx10s(t), trainer, "team-a/run1", "c"); err != nil {
		t.Errorf("after a broken policy: %v", err)
	}
	// A valid one applies, and ends the open follow Scan of the trainer it
	// no longer grants.
	trainerScan := openFollow(t, trainer, "team-a/run1")
	testpki.WriteFile(t, policyFile, []byte(strings.Replace(e2ePolicy, "team-a/sa/trainer", "team-b/sa/trainer", 1)))
	p.WaitLog(`authz: policy in force.*team-b/sa/trainer`)
	if _, err := appendOne(ctx10s(t), other, "team-a/run1", "d"); err != nil {
		t.Errorf("after granting team-b's trainer: %v", err)
	}
	if _, err := appendOne(ctx10s(t), trainer, "team-a/run1", "e"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("after revoking team-a's trainer: %v", err)
	}
	if err := recvUntilEnd(trainerScan); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "was revoked") {
		t.Errorf("the revoked trainer's follow Scan ended with %v, want PermissionDenied", err)
	}

	// A client CA bundle that no longer trusts team-b's trainer ends its
	// open follow Scan too.
	otherScan := openFollow(t, other, "team-a/run1")
	testpki.WriteFile(t, caFile, testpki.NewCA(t, "next client CA").PEM)
	if err := recvUntilEnd(otherScan); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("the follow Scan of a client the new CAs do not trust ended with %v, want PermissionDenied", err)
	}

	if code, took := p.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM (%v)", code, took)
	}
}

// openFollow opens a follow Scan of shard, which must hold a record, and
// waits for its first batch: the stream is then open and authorized.
func openFollow(t *testing.T, c rolloutv1.RolloutServiceClient, shard string) grpc.ServerStreamingClient[rolloutv1.ScanResponse] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: shard, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("follow %s: %v", shard, err)
	}
	return stream
}

// recvUntilEnd reads stream until it ends, and returns how (its 30 s
// deadline if nothing ends it).
func recvUntilEnd(stream grpc.ServerStreamingClient[rolloutv1.ScanResponse]) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

// The Azure connection string can come from a file named by a flag; the
// binary then works against Azurite and never logs the key.
func TestBinaryConnectionStringFile(t *testing.T) {
	_, store := azureEnv(t)
	file := filepath.Join(t.TempDir(), "connection-string")
	if err := os.WriteFile(file, []byte(az.ConnectionString+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`AccountKey=([^;]+)`).FindStringSubmatch(az.ConnectionString)
	if key == nil {
		t.Fatalf("no AccountKey in %q", az.ConnectionString)
	}
	p := startBare(t, nil, "--store", store, "--azure-connection-string-file", file)
	c := rolloutv1.NewRolloutServiceClient(grpcClient(t, p.GRPCAddr, insecure.NewCredentials()))
	if _, err := appendOne(ctx10s(t), c, "s", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx10s(t), &rolloutv1.GetRequest{Shard: "s", Id: "a"}); err != nil {
		t.Fatal(err)
	}
	if code, _ := p.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if strings.Contains(p.Output(), key[1]) {
		t.Error("the log contains the account key")
	}
	if strings.Contains(strings.Join(p.Cmd.Args, " "), key[1]) {
		t.Error("the command line contains the account key")
	}
}
