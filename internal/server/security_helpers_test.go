package server

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
	"github.com/rolloutd/rolloutd/internal/tlsreload"
)

// pki is a server certificate and a client CA on disk, served through a
// tlsreload.Reloader, with clients that trust the server's CA.
type pki struct {
	dir           string
	serverCA      *testpki.CA // issues the server's certificates
	clientCA      *testpki.CA // issues the clients'
	certFile, key string
	caFile        string
	reloader      *tlsreload.Reloader
}

// newPKI writes a server certificate (CN "server-1") and, when mtls, the
// client CA, and loads them. The Reloader only checks when told to.
func newPKI(t testing.TB, mtls bool) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), serverCA: testpki.NewCA(t, "server CA"), clientCA: testpki.NewCA(t, "client CA")}
	p.certFile, p.key = p.serverCA.Server(t, "server-1").Write(t, p.dir)
	cfg := tlsreload.Config{CertFile: p.certFile, KeyFile: p.key, Interval: -1, Logger: zaptest.NewLogger(t)}
	if mtls {
		p.caFile = filepath.Join(p.dir, "client-ca.pem")
		testpki.WriteFile(t, p.caFile, p.clientCA.PEM)
		cfg.ClientCAFile = p.caFile
	}
	r, err := tlsreload.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	p.reloader = r
	return p
}

// creds are client transport credentials that trust the server CA and
// present leaf, if any.
func (p *pki) creds(t testing.TB, leaf *testpki.Leaf) credentials.TransportCredentials {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.serverCA.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if leaf != nil {
		// Always present the leaf, even when it does not chain to a CA
		// the server lists as acceptable (Go's default would then send
		// none), so that the server's own verification is what refuses
		// it.
		c := leaf.TLS(t)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	}
	return credentials.NewTLS(cfg)
}

// tcpServer is a Server on a loopback TCP listener.
type tcpServer struct {
	*Server
	addr   string
	store  blob.Store
	served chan error
}

// startTCP starts a Server with cfg (on a fresh memstore unless cfg has a
// store) on 127.0.0.1, and shuts it down when the test ends.
func startTCP(t testing.TB, cfg Config) *tcpServer {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	if cfg.Writer.Logger == nil {
		cfg.Writer = testWriterOptions(t)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &tcpServer{Server: s, addr: lis.Addr().String(), store: cfg.Store, served: make(chan error, 1)}
	go func() { ts.served <- s.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-ts.served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ts
}

// dial connects to addr with creds (plaintext when nil) and closes the
// connection when the test ends.
func dial(t testing.TB, addr string, creds credentials.TransportCredentials) rolloutv1.RolloutServiceClient {
	t.Helper()
	return rolloutv1.NewRolloutServiceClient(dialConn(t, addr, creds))
}

func dialConn(t testing.TB, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rpcCtx bounds one test RPC.
func rpcCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func appendReq(shardName string, ids ...string) *rolloutv1.AppendRequest {
	req := &rolloutv1.AppendRequest{Shard: shardName}
	for _, id := range ids {
		req.Records = append(req.Records, record(id))
	}
	return req
}

// blobsUnder lists the names of the blobs whose name contains part.
func blobsUnder(t testing.TB, store blob.Store, part string) []string {
	t.Helper()
	var out []string
	token := ""
	for {
		page, err := store.List(context.Background(), blob.ListOptions{Token: token, Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			if strings.Contains(it.Name, part) {
				out = append(out, it.Name)
			}
		}
		if page.Next == "" {
			return out
		}
		token = page.Next
	}
}
