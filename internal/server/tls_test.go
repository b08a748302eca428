package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// Real TLS on loopback: the server takes only TLS, and under mTLS only
// clients with a certificate from the client CA.
func TestTransportSecurity(t *testing.T) {
	for _, mtls := range []bool{false, true} {
		name := map[bool]string{false: "tls", true: "mtls"}[mtls]
		t.Run(name, func(t *testing.T) {
			p := newPKI(t, mtls)
			ts := startTCP(t, Config{ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
			good := p.clientCA.ClientURI(t, "spiffe://test/ns/team-a/sa/trainer")
			wrongCA := testpki.NewCA(t, "another CA").ClientURI(t, "spiffe://test/ns/team-a/sa/trainer")
			for _, tc := range []struct {
				name   string
				creds  credentials.TransportCredentials
				wantOK bool
			}{
				{"plaintext", insecure.NewCredentials(), false},
				{"TLS, server not trusted", credentials.NewTLS(&tls.Config{RootCAs: testpki.NewCA(t, "x").Pool(), ServerName: "localhost"}), false},
				{"TLS, no client cert", p.creds(t, nil), !mtls},
				{"TLS, client cert from another CA", p.creds(t, wrongCA), !mtls},
				{"TLS, good client cert", p.creds(t, good), true},
			} {
				_, err := dial(t, ts.addr, tc.creds).Append(rpcCtx(t), appendReq("team-a/run1", "r-"+strings.Join(strings.FieldsFunc(tc.name, func(r rune) bool { return r == ' ' || r == ',' }), "-")))
				if tc.wantOK && err != nil {
					t.Errorf("%s: %v", tc.name, err)
				}
				if !tc.wantOK && status.Code(err) != codes.Unavailable {
					t.Errorf("%s: %v, want Unavailable (connection refused)", tc.name, err)
				}
				t.Logf("%s: %v", tc.name, err)
			}
		})
	}
}

// Rotating the server certificate on disk reaches new connections without a
// restart; an established connection keeps working.
func TestServerCertRotation(t *testing.T) {
	p := newPKI(t, true)
	ts := startTCP(t, Config{ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
	client := p.clientCA.ClientDNS(t, "trainer.test")
	served := func(c rolloutv1.RolloutServiceClient, id string) string {
		t.Helper()
		var pr peer.Peer
		if _, err := c.Append(rpcCtx(t), appendReq("rot", id), grpc.Peer(&pr)); err != nil {
			t.Fatal(err)
		}
		return pr.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].Subject.CommonName
	}
	old := dial(t, ts.addr, p.creds(t, client))
	if cn := served(old, "a"); cn != "server-1" {
		t.Fatalf("served %q", cn)
	}

	p.serverCA.Server(t, "server-2").Write(t, p.dir)
	if changed, err := p.reloader.Check(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if cn := served(dial(t, ts.addr, p.creds(t, client)), "b"); cn != "server-2" {
		t.Errorf("a new connection after rotation got %q, want server-2", cn)
	}
	if cn := served(old, "c"); cn != "server-1" {
		t.Errorf("the established connection got %q, want its server-1", cn)
	}
}

// A message over --max-message-bytes is refused ResourceExhausted by gRPC
// before it reaches a handler, over TLS as over plaintext.
func TestOversizedMessage(t *testing.T) {
	p := newPKI(t, false)
	ts := startTCP(t, Config{MaxMessageBytes: 64 << 10, MaxRecordBytes: 32 << 10,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
	c := dial(t, ts.addr, p.creds(t, nil))
	req := appendReq("big", "a", "b", "c")
	for _, r := range req.Records {
		r.Content = strings.Repeat("x", 30<<10)
	}
	_, err := c.Append(rpcCtx(t), req)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 90 KiB message to a 64 KiB server: %v, want ResourceExhausted", err)
	}
	t.Logf("oversized: %v", err)
	if names := blobsUnder(t, ts.store, "big"); len(names) != 0 {
		t.Errorf("the refused append wrote %v", names)
	}
	if _, err := c.Append(rpcCtx(t), appendReq("big", "small")); err != nil {
		t.Errorf("a small append on the same connection: %v", err)
	}
}

// A client that floods pings is sent GOAWAY ENHANCE_YOUR_CALM
// "too_many_pings" and disconnected, while another client's appends keep
// succeeding before, during and after.
func TestPingFloodDisconnected(t *testing.T) {
	ts := startTCP(t, Config{})
	good := dial(t, ts.addr, nil)
	if _, err := good.Append(rpcCtx(t), appendReq("calm", "before")); err != nil {
		t.Fatal(err)
	}

	conn, err := net.DialTimeout("tcp", ts.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	w := http2.NewFramer(conn, strings.NewReader(""))
	if err := w.WriteSettings(); err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		goAway bool
		code   http2.ErrCode
		debug  string
		err    error // how reading ended
	}
	done := make(chan outcome, 1)
	go func() {
		r := http2.NewFramer(io.Discard, conn)
		var o outcome
		for {
			f, err := r.ReadFrame()
			if err != nil {
				o.err = err
				done <- o
				return
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok && !o.goAway {
				o.goAway, o.code, o.debug = true, ga.ErrCode, string(ga.DebugData())
			}
		}
	}()

	// The calm client appends while the flood runs.
	var wg sync.WaitGroup
	calmErrs := make(chan error, 50)
	wg.Go(func() {
		for i := range 50 {
			if _, err := good.Append(rpcCtx(t), appendReq("calm", fmt.Sprintf("during-%d", i))); err != nil {
				calmErrs <- err
			}
		}
	})

	pings := 0
	var o outcome
flood:
	for pings < 10000 {
		select {
		case o = <-done:
			break flood
		default:
		}
		if err := w.WritePing(false, [8]byte{byte(pings)}); err != nil {
			o = <-done
			break
		}
		pings++
	}
	if o.err == nil {
		select {
		case o = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("the flooding connection was not closed")
		}
	}
	wg.Wait()
	close(calmErrs)
	for err := range calmErrs {
		t.Errorf("the calm client failed during the flood: %v", err)
	}
	if !o.goAway || o.code != http2.ErrCodeEnhanceYourCalm || o.debug != "too_many_pings" {
		t.Fatalf("after %d pings: GOAWAY %v %v %q, connection ended with %v; want ENHANCE_YOUR_CALM too_many_pings", pings, o.goAway, o.code, o.debug, o.err)
	}
	t.Logf("flooder (%d pings written) got GOAWAY %v %q; its connection then ended with: %v", pings, o.code, o.debug, o.err)
	if _, err := good.Append(rpcCtx(t), appendReq("calm", "after")); err != nil {
		t.Errorf("the calm client after the flood: %v", err)
	}
}

// Under mTLS the health-only listener answers health checks in plaintext,
// with no client certificate, and serves nothing else; it follows the main
// server's status through shutdown.
func TestHealthOnlyListener(t *testing.T) {
	p := newPKI(t, true)
	ts := startTCP(t, Config{DrainDelay: 300 * time.Millisecond,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthServed := make(chan error, 1)
	go func() { healthServed <- ts.ServeHealth(lis) }()

	conn := dialConn(t, lis.Addr().String(), nil)
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", rolloutv1.RolloutService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(rpcCtx(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q on the plaintext health port: %v %v", svc, resp, err)
		}
	}
	if _, err := rolloutv1.NewRolloutServiceClient(conn).Append(rpcCtx(t), appendReq("s", "a")); status.Code(err) != codes.Unimplemented {
		t.Errorf("Append on the health port: %v, want Unimplemented", err)
	}
	// No reflection: it would describe every symbol in the binary,
	// RolloutService included, to anyone who reaches the port.
	for _, name := range []string{"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		stream, err := conn.NewStream(rpcCtx(t), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/"+name+"/ServerReflectionInfo")
		if err == nil {
			// v1alpha's request is wire-compatible with v1's.
			_ = stream.SendMsg(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: rolloutv1.RolloutService_ServiceDesc.ServiceName}})
			var resp reflectionpb.ServerReflectionResponse
			if err = stream.RecvMsg(&resp); err == nil {
				t.Errorf("%s on the health port describes %s", name, resp.GetFileDescriptorResponse())
			}
		}
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s on the health port: %v, want Unimplemented", name, err)
		}
	}
	if _, err := healthpb.NewHealthClient(dialConn(t, ts.addr, nil)).Check(rpcCtx(t), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext health on the mTLS port: %v, want refused", err)
	}

	// Shutdown: NOT_SERVING on the health port during the drain delay, then
	// ServeHealth returns.
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ts.Shutdown(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := hc.Check(rpcCtx(t), &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health port never reported NOT_SERVING during shutdown: %v %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-shut
	select {
	case err := <-healthServed:
		if err != nil {
			t.Errorf("ServeHealth: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("ServeHealth did not return after Shutdown")
	}
}
