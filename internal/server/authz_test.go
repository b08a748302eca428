package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

const (
	idTrainer  = "spiffe://test/ns/team-a/sa/trainer"    // URI SAN
	idReader   = "reader.team-b.test"                    // DNS SAN
	idAdmin    = "cn-admin"                              // CN only, granted as cn:
	idOther    = "spiffe://test/ns/other/sa/x"           // no grant
	idImpostor = "cn:spiffe://test/ns/team-a/sa/trainer" // the trainer's SPIFFE ID as a CN, no SAN
)

const testPolicy = `
grants:
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [append, get, scan]
  - identities: [reader.team-b.test]
    shardPrefixes: [team-a/eval, team-b]
    verbs: [get, scan]
  - identities: ["cn:cn-admin"]
    shardPrefixes: ["*"]
    verbs: [get]
`

// authzServer is an mTLS server enforcing the policy in policyFile, with a
// client per identity.
type authzServer struct {
	*tcpServer
	p          *pki
	policyFile string
	az         *authz.Authorizer
	clients    map[string]rolloutv1.RolloutServiceClient
}

func startAuthz(t *testing.T, policy string) *authzServer {
	t.Helper()
	return startAuthzConfig(t, policy, Config{})
}

// startAuthzConfig is startAuthz with more of the server's config.
func startAuthzConfig(t *testing.T, policy string, cfg Config) *authzServer {
	t.Helper()
	p := newPKI(t, true)
	file := filepath.Join(p.dir, "policy.yaml")
	testpki.WriteFile(t, file, []byte(policy))
	az, err := authz.Load(file, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(az.Close)
	as := &authzServer{p: p, policyFile: file, az: az, clients: map[string]rolloutv1.RolloutServiceClient{}}
	cfg.Authorizer = az
	cfg.ServerOptions = append(cfg.ServerOptions, grpc.Creds(credentials.NewTLS(p.reloader.Config())))
	as.tcpServer = startTCP(t, cfg)
	for _, id := range []string{idTrainer, idReader, idAdmin, idOther, idImpostor} {
		as.clients[id] = dial(t, as.addr, p.creds(t, testLeaf(t, p.clientCA, id)))
	}
	return as
}

// testLeaf issues the test certificate of one of the identities above.
func testLeaf(t testing.TB, ca *testpki.CA, id string) *testpki.Leaf {
	switch id {
	case idReader:
		return ca.ClientDNS(t, id)
	case idAdmin:
		return ca.ClientCN(t, id)
	case idImpostor:
		return ca.ClientCN(t, strings.TrimPrefix(id, "cn:"))
	}
	return ca.ClientURI(t, id)
}

// The authorization table over real mTLS: each identity × verb × shard,
// including shards that share a prefix with a grant but not a path
// boundary. A denied call is PermissionDenied naming the identity and the
// verb, and writes nothing.
func TestAuthorizationTable(t *testing.T) {
	as := startAuthz(t, testPolicy)
	shards := []string{"team-a", "team-a/run1", "team-a/eval", "team-ab", "team-ab/run1", "team-b/x", "team-c"}
	teamA := []string{"team-a", "team-a/run1", "team-a/eval"}
	allowed := map[string]map[authz.Verb][]string{
		idTrainer: {authz.Append: teamA, authz.Get: teamA, authz.Scan: teamA},
		idReader:  {authz.Get: {"team-a/eval", "team-b/x"}, authz.Scan: {"team-a/eval", "team-b/x"}},
		idAdmin:   {authz.Get: shards},
		idOther:   {},
		// Before identities were tagged, the impostor was the trainer.
		idImpostor: {},
	}
	n := 0
	// Appends first, so gets and scans find data. ListShards names a
	// prefix and is filtered, not refused, per shard: lifecycle_test.go.
	for _, verb := range []authz.Verb{authz.Append, authz.Get, authz.Scan, authz.Describe, authz.Delete} {
		for id, c := range as.clients {
			for _, s := range shards {
				n++
				var err error
				switch verb {
				case authz.Append:
					_, err = c.Append(rpcCtx(t), appendReq(s, fmt.Sprintf("r-%d", n)))
				case authz.Get:
					_, err = c.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: s, Id: "r-1"})
				case authz.Scan:
					var stream grpc.ServerStreamingClient[rolloutv1.ScanResponse]
					if stream, err = c.Scan(rpcCtx(t), &rolloutv1.ScanRequest{Shard: s}); err == nil {
						_, err = stream.Recv()
						if err == io.EOF {
							err = nil
						}
					}
				case authz.Describe:
					_, err = c.DescribeShard(rpcCtx(t), &rolloutv1.DescribeShardRequest{Shard: s})
				case authz.Delete:
					_, err = c.DeleteShard(rpcCtx(t), &rolloutv1.DeleteShardRequest{Shard: s})
				}
				code := status.Code(err)
				if contains(allowed[id][verb], s) {
					// Allowed: the call reached the handler (a get of a
					// missing record is NotFound, not a refusal).
					if code != codes.OK && code != codes.NotFound {
						t.Errorf("%s %s %s: %v, want allowed", id, verb, s, err)
					}
					continue
				}
				msg := status.Convert(err).Message()
				// An identity without any grant is refused before its
				// request (and its shard) is read.
				shardNamed := len(allowed[id]) == 0 && strings.Contains(msg, "any shard") || strings.Contains(msg, s)
				if code != codes.PermissionDenied || !strings.Contains(msg, id) || !strings.Contains(msg, string(verb)) || !shardNamed {
					t.Errorf("%s %s %s: %v, want PermissionDenied naming the identity, verb and shard", id, verb, s, err)
				}
			}
		}
	}
	if names := blobsUnder(t, as.store, "/team-a/"); len(names) == 0 {
		t.Fatal("the allowed appends wrote nothing under /team-a/: the blob-name check below would prove nothing")
	}
	for _, s := range []string{"team-ab/", "team-b/", "team-c/"} {
		if names := blobsUnder(t, as.store, "/"+s); len(names) != 0 {
			t.Errorf("denied appends wrote %v", names)
		}
	}
	_, err := as.clients[idOther].Append(rpcCtx(t), appendReq("team-ab/run1", "x"))
	t.Logf("a denied append answers: %v", err)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Reloading a broken policy keeps the old one in force, over the wire; a
// valid one applies at once.
func TestAuthorizationReload(t *testing.T) {
	as := startAuthz(t, testPolicy)
	trainer := as.clients[idTrainer]
	if _, err := trainer.Append(rpcCtx(t), appendReq("team-a/run1", "a")); err != nil {
		t.Fatal(err)
	}
	// A typo that, read loosely, would drop the prefix list: rejected.
	testpki.WriteFile(t, as.policyFile, []byte(strings.Replace(testPolicy, "shardPrefixes: [team-a]", "shardprefixes: [team-a]", 1)))
	if _, err := as.az.Check(); !errors.Is(err, authz.ErrInvalidPolicy) {
		t.Fatalf("broken policy: %v", err)
	}
	if _, err := trainer.Append(rpcCtx(t), appendReq("team-a/run1", "b")); err != nil {
		t.Errorf("after a broken policy file the trainer lost its grant: %v", err)
	}
	if _, err := as.clients[idOther].Append(rpcCtx(t), appendReq("team-a/run1", "c")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("after a broken policy file a stranger may append: %v", err)
	}
	// A valid policy that gives team-a to the other identity instead.
	testpki.WriteFile(t, as.policyFile, []byte(strings.Replace(testPolicy, idTrainer, idOther, 1)))
	if changed, err := as.az.Check(); !changed || err != nil {
		t.Fatalf("valid policy: %v %v", changed, err)
	}
	if _, err := trainer.Append(rpcCtx(t), appendReq("team-a/run1", "d")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the revoked trainer: %v", err)
	}
	if _, err := as.clients[idOther].Append(rpcCtx(t), appendReq("team-a/run1", "e")); err != nil {
		t.Errorf("the newly granted identity: %v", err)
	}
}

// Under mTLS with no policy, every client with a certificate from the
// client CA may call.
func TestMutualTLSWithoutPolicyAdmitsAll(t *testing.T) {
	p := newPKI(t, true)
	ts := startTCP(t, Config{ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
	c := dial(t, ts.addr, p.creds(t, p.clientCA.ClientURI(t, idOther)))
	if _, err := c.Append(rpcCtx(t), appendReq("team-ab/run1", "a")); err != nil {
		t.Error(err)
	}
}

// fakeStream is a grpc.ServerStream whose client sends msgs.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []proto.Message
	sent int
}

func (f *fakeStream) Context() context.Context { return f.ctx }

func (f *fakeStream) RecvMsg(m any) error {
	if len(f.msgs) == 0 {
		return errors.New("EOF")
	}
	proto.Merge(m.(proto.Message), f.msgs[0])
	f.msgs = f.msgs[1:]
	return nil
}

func (f *fakeStream) SendMsg(any) error { f.sent++; return nil }

// peerCtx is a context whose peer presented a verified certificate for id.
func peerCtx(t *testing.T, id string) context.Context {
	leaf := testLeaf(t, testpki.NewCA(t, "CA"), id)
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf.Cert}, VerifiedChains: [][]*x509.Certificate{{leaf.Cert}}},
	}})
}

// The stream interceptor reads the shard from each request message through
// GetShard, as for Scan (a server-streaming RPC whose handler receives one
// request before it runs): a refused message never reaches the handler,
// and nothing is sent before a message passes.
func TestGuardStream(t *testing.T) {
	p, err := authz.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	g := newGuard(Config{Authorizer: authz.NewStatic(p)}, nil)
	scan := &grpc.StreamServerInfo{FullMethod: rolloutPrefix + "Scan", IsServerStream: true}
	// A handler like the generated one: receive the request, then send.
	handler := func(_ any, ss grpc.ServerStream) error {
		req := new(rolloutv1.GetRequest) // any request with GetShard
		if err := ss.RecvMsg(req); err != nil {
			return err
		}
		return ss.SendMsg(&rolloutv1.GetResponse{})
	}

	for _, tc := range []struct {
		id, shard string
		want      codes.Code
	}{
		{idTrainer, "team-a/run1", codes.OK},
		{idReader, "team-a/eval/x", codes.OK},
		{idReader, "team-a/run1", codes.PermissionDenied},
		{idTrainer, "team-ab", codes.PermissionDenied},
		{idAdmin, "team-a", codes.PermissionDenied}, // the admin may get, not scan
		{idImpostor, "team-a/run1", codes.PermissionDenied},
		{idTrainer, "team-a/../team-b", codes.InvalidArgument},
	} {
		fs := &fakeStream{ctx: peerCtx(t, tc.id), msgs: []proto.Message{&rolloutv1.GetRequest{Shard: tc.shard}}}
		err := g.stream(nil, fs, scan, handler)
		if status.Code(err) != tc.want || (tc.want != codes.OK && fs.sent != 0) {
			t.Errorf("%s scan %s: %v, sent %d; want %v", tc.id, tc.shard, err, fs.sent, tc.want)
		}
	}

	// A handler that sends before receiving is refused.
	fs := &fakeStream{ctx: peerCtx(t, idTrainer)}
	err = g.stream(nil, fs, scan, func(_ any, ss grpc.ServerStream) error { return ss.SendMsg(&rolloutv1.GetResponse{}) })
	if status.Code(err) != codes.PermissionDenied || fs.sent != 0 {
		t.Errorf("send before receive: %v, sent %d", err, fs.sent)
	}
	// A RolloutService method with no verb is refused under a policy.
	err = g.stream(nil, &fakeStream{ctx: peerCtx(t, idTrainer)}, &grpc.StreamServerInfo{FullMethod: rolloutPrefix + "Tail"}, handler)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Tail") {
		t.Errorf("an unmapped method: %v", err)
	}
	// Other services pass untouched.
	called := false
	err = g.stream(nil, &fakeStream{ctx: context.Background()}, &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/Watch"},
		func(any, grpc.ServerStream) error { called = true; return nil })
	if err != nil || !called {
		t.Errorf("health Watch: %v, called %v", err, called)
	}
}
