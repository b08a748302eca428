package server

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// revokePolicy lets the trainer scan team-a and the reader scan team-b;
// the trainer appends to both.
const revokePolicy = `
grants:
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a, team-b]
    verbs: [append, get]
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [scan]
  - identities: [reader.team-b.test]
    shardPrefixes: [team-b]
    verbs: [get, scan]
`

// follow opens a follow Scan of shard and waits for its first batch, which
// the caller must have appended: then the guard has let the stream through.
func follow(t *testing.T, c rolloutv1.RolloutServiceClient, shard string) grpc.ServerStreamingClient[rolloutv1.ScanResponse] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: shard, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("follow %s: first batch: %v", shard, err)
	}
	return stream
}

// recvWithin receives the next message of stream, failing the test if none
// comes (and no error) within d.
func recvWithin(t *testing.T, stream grpc.ServerStreamingClient[rolloutv1.ScanResponse], d time.Duration) (*rolloutv1.ScanResponse, error) {
	t.Helper()
	type result struct {
		resp *rolloutv1.ScanResponse
		err  error
	}
	c := make(chan result, 1)
	go func() {
		resp, err := stream.Recv()
		c <- result{resp, err}
	}()
	select {
	case r := <-c:
		return r.resp, r.err
	case <-time.After(d):
		t.Fatalf("the stream neither delivered nor ended within %s", d)
		return nil, nil
	}
}

// A policy reload that revokes an identity's scan ends its open follow
// Scan with PERMISSION_DENIED at once, naming the shard and the identity;
// a stream still allowed stays open and keeps delivering, and the revoked
// identity's unary calls that are still allowed go on.
func TestPolicyReloadRevokesOpenStreams(t *testing.T) {
	as := startAuthz(t, revokePolicy)
	trainer, reader := as.clients[idTrainer], as.clients[idReader]
	if _, err := trainer.Append(rpcCtx(t), appendReq("team-a/run1", "a1")); err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.Append(rpcCtx(t), appendReq("team-b/run1", "b1")); err != nil {
		t.Fatal(err)
	}
	revoked := follow(t, trainer, "team-a/run1")
	kept := follow(t, reader, "team-b/run1")

	// A reload that changes nothing for them ends nothing.
	testpki.WriteFile(t, as.policyFile, []byte(revokePolicy+"\n# touched\n"))
	if changed, err := as.az.Check(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	// Drop the trainer's scan grant.
	noScan := strings.Replace(revokePolicy, "    shardPrefixes: [team-a]\n    verbs: [scan]\n", "    shardPrefixes: [team-a]\n    verbs: [get]\n", 1)
	testpki.WriteFile(t, as.policyFile, []byte(noScan))
	if changed, err := as.az.Check(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	_, err := recvWithin(t, revoked, 5*time.Second)
	want := `permission to scan shard "team-a/run1" was revoked for identity "uri:` + idTrainer + `"`
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("the revoked stream ended with %v, want PermissionDenied saying %s", err, want)
	}
	if n := testutil.ToFloat64(as.Server.guard.revoked.WithLabelValues("scan")); n != 1 {
		t.Errorf("rolloutd_streams_revoked_total{verb=scan} = %v, want 1", n)
	}

	// The reader's stream is still open and delivers the next commit.
	if _, err := trainer.Append(rpcCtx(t), appendReq("team-b/run1", "b2")); err != nil {
		t.Fatal(err)
	}
	resp, err := recvWithin(t, kept, 10*time.Second)
	if err != nil || len(resp.GetRecords()) != 1 || resp.GetRecords()[0].GetId() != "b2" {
		t.Errorf("the stream still allowed: %v, %v; want record b2", resp, err)
	}
	// The trainer's allowed unary calls go on; a new Scan is refused.
	if _, err := trainer.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "team-a/run1", Id: "a1"}); err != nil {
		t.Errorf("the trainer's get after its scan was revoked: %v", err)
	}
	stream, err := trainer.Scan(rpcCtx(t), &rolloutv1.ScanRequest{Shard: "team-a/run1"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a new scan by the trainer: %v", err)
	}
	if open := openStreams(as.Server); open != 1 {
		t.Errorf("%d open streams registered, want 1 (the reader's)", open)
	}
}

func openStreams(s *Server) int {
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	return len(s.guard.open)
}

// A client CA reload re-verifies the client of every open stream against
// the new CAs: a client they no longer trust has its streams ended with
// PERMISSION_DENIED and its new calls on the same connection refused,
// while a client they trust carries on. No policy is needed for that.
func TestClientCAReloadRevokesUntrustedStreams(t *testing.T) {
	p := newPKI(t, true)
	retiring := testpki.NewCA(t, "retiring client CA")
	testpki.WriteFile(t, p.caFile, append(slices.Clone(p.clientCA.PEM), retiring.PEM...))
	if changed, err := p.reloader.Check(); !changed || err != nil {
		t.Fatalf("CA bundle with both CAs: %v %v", changed, err)
	}
	ts := startTCP(t, Config{ClientCAs: p.reloader, ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
	staying := dial(t, ts.addr, p.creds(t, p.clientCA.ClientURI(t, idTrainer)))
	leaving := dial(t, ts.addr, p.creds(t, retiring.ClientURI(t, idOther)))
	for _, c := range []rolloutv1.RolloutServiceClient{staying, leaving} {
		if _, err := c.Append(rpcCtx(t), appendReq("s", "r1")); err != nil {
			t.Fatal(err)
		}
	}
	keptStream, endedStream := follow(t, staying, "s"), follow(t, leaving, "s")

	// The server certificate alone rotates: both stay trusted.
	p.certFile, p.key = p.serverCA.Server(t, "server-2").Write(t, p.dir)
	if changed, err := p.reloader.Check(); !changed || err != nil {
		t.Fatalf("server certificate rotation: %v %v", changed, err)
	}
	// The retiring CA leaves the bundle.
	testpki.WriteFile(t, p.caFile, p.clientCA.PEM)
	if changed, err := p.reloader.Check(); !changed || err != nil {
		t.Fatalf("CA bundle without the retiring CA: %v %v", changed, err)
	}
	_, err := recvWithin(t, endedStream, 5*time.Second)
	want := `the client certificate of identity "uri:` + idOther + `" is not trusted by the client CAs now in force`
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), want) {
		t.Errorf("the untrusted client's stream ended with %v, want PermissionDenied saying %s", err, want)
	}
	if _, err := leaving.Append(rpcCtx(t), appendReq("s", "r2")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a new call of the untrusted client on its open connection: %v, want PermissionDenied", err)
	}
	if _, err := staying.Append(rpcCtx(t), appendReq("s", "r3")); err != nil {
		t.Fatal(err)
	}
	resp, err := recvWithin(t, keptStream, 10*time.Second)
	if err != nil || len(resp.GetRecords()) == 0 {
		t.Errorf("the trusted client's stream: %v, %v; want its next records", resp, err)
	}
}

// scanStream is a Scan stream whose context is ctx and whose sends vanish.
type scanStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s scanStream) Context() context.Context           { return s.ctx }
func (s scanStream) Send(*rolloutv1.ScanResponse) error { return nil }
func (s scanStream) SendMsg(any) error                  { return nil }

// A Scan ended by its context answers with the context's cause when that is
// a gRPC status (a revocation), and otherwise with Unavailable and where to
// resume.
func TestScanAnswersWithTheCauseOfItsEnd(t *testing.T) {
	svc := newTestService(t, memstore.New(), 4, nil)
	for _, tc := range []struct {
		cause error
		want  codes.Code
	}{
		{status.Error(codes.PermissionDenied, "permission to scan shard \"s\" was revoked"), codes.PermissionDenied},
		{context.Canceled, codes.Unavailable},
		{errors.New("some other cause"), codes.Unavailable},
	} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tc.cause)
		err := svc.Scan(&rolloutv1.ScanRequest{Shard: "s", Follow: true}, scanStream{ctx: ctx})
		if status.Code(err) != tc.want {
			t.Errorf("cause %v: %v, want %v", tc.cause, err, tc.want)
		}
	}
}

// Whatever a revoked stream's handler returns, and whether or not it
// watches its context, the stream ends with the revocation, and nothing
// more is sent on it.
func TestGuardRevokedStreamAnswersWithTheRevocation(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	testpki.WriteFile(t, file, []byte(testPolicy))
	az, err := authz.Load(file, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer az.Close()
	g := newGuard(Config{Authorizer: az}, nil)
	g.subscribe(nil)
	defer g.close()

	received := make(chan struct{})
	var sendErr error
	handler := func(_ any, ss grpc.ServerStream) error {
		if err := ss.RecvMsg(new(rolloutv1.ScanRequest)); err != nil {
			return err
		}
		close(received)
		<-ss.Context().Done()
		sendErr = ss.SendMsg(&rolloutv1.ScanResponse{})
		return errors.New("a handler that does not know why it stopped")
	}
	fs := &fakeStream{ctx: peerCtx(t, idTrainer), msgs: []proto.Message{&rolloutv1.ScanRequest{Shard: "team-a/run1"}}}
	done := make(chan error, 1)
	go func() {
		done <- g.stream(nil, fs, &grpc.StreamServerInfo{FullMethod: rolloutPrefix + "Scan", IsServerStream: true}, handler)
	}()
	<-received
	testpki.WriteFile(t, file, []byte(strings.Replace(testPolicy, "verbs: [append, get, scan]", "verbs: [append, get]", 1)))
	if _, err := az.Check(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "was revoked") {
			t.Errorf("the revoked stream answered %v, want its revocation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked stream's context was not cancelled")
	}
	if status.Code(sendErr) != codes.PermissionDenied || fs.sent != 0 {
		t.Errorf("a send after the revocation: %v (sent %d), want it refused", sendErr, fs.sent)
	}
}
