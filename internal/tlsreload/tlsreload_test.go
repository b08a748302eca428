package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tlsServer accepts TLS connections with cfg on loopback, completes each
// handshake and closes the connection, until the test ends.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte{1})     // tell the client it was accepted
					io.Copy(io.Discard, c) // until the client closes
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// handshake dials addr and returns the server's leaf certificate.
func handshake(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// A TLS 1.3 server reports a rejected client certificate only after
	// the client's handshake completes: wait for the server's byte (or its
	// alert).
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func TestRotationAppliesToNewConnections(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "server CA")
	first := ca.Server(t, "first")
	certFile, keyFile := first.Write(t, dir)
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, Interval: -1, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := tlsServer(t, r.Config())
	client := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"}

	got, err := handshake(addr, client)
	if err != nil || got.Subject.CommonName != "first" {
		t.Fatalf("first handshake: %v %v", got, err)
	}

	// A rotation that cannot apply: the new certificate with the old key.
	second := ca.Server(t, "second")
	testpki.WriteFile(t, certFile, second.CertPEM)
	if changed, err := r.Check(); changed || err == nil || !strings.Contains(err.Error(), "private key does not match") {
		t.Errorf("mismatched key: changed %v, %v", changed, err)
	}
	if got, err := handshake(addr, client); err != nil || got.Subject.CommonName != "first" {
		t.Errorf("after a bad rotation the server serves %v (%v), want first", got, err)
	}

	// The key arrives too: the next check applies both.
	testpki.WriteFile(t, keyFile, second.KeyPEM)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("rotation: changed %v, %v", changed, err)
	}
	if got, err := handshake(addr, client); err != nil || got.Subject.CommonName != "second" {
		t.Errorf("after rotation the server serves %v (%v), want second", got, err)
	}
	if !r.NotAfter().Equal(second.Cert.NotAfter) {
		t.Errorf("NotAfter %v, want the new certificate's %v", r.NotAfter(), second.Cert.NotAfter)
	}
	if loads, failures := r.Stats(); loads != 2 || failures != 1 {
		t.Errorf("stats: %d loads, %d failures; want 2, 1", loads, failures)
	}
}

// The watcher's own polling picks a rotation up.
func TestRotationByPolling(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "server CA")
	certFile, keyFile := ca.Server(t, "first").Write(t, dir)
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, Interval: 10 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ca.Server(t, "second").Write(t, dir)
	deadline := time.Now().Add(10 * time.Second)
	for r.cur.Load().leaf.Subject.CommonName != "second" {
		if time.Now().After(deadline) {
			t.Fatal("rotation not picked up by polling")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "rolloutd CA")
	other := testpki.NewCA(t, "some other CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir)
	caFile := filepath.Join(dir, "ca.pem")
	testpki.WriteFile(t, caFile, ca.PEM)
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.MutualTLS() {
		t.Error("MutualTLS() false with a client CA")
	}
	mtls := tlsServer(t, r.Config())
	serverOnly := tlsServer(t, r.ServerOnlyConfig())

	good := ca.ClientURI(t, "spiffe://test/good").TLS(t)
	wrong := other.ClientURI(t, "spiffe://test/good").TLS(t)
	for _, tc := range []struct {
		name   string
		addr   string
		certs  []tls.Certificate
		wantOK bool
	}{
		{"no client cert", mtls, nil, false},
		{"client cert from another CA", mtls, []tls.Certificate{wrong}, false},
		{"good client cert", mtls, []tls.Certificate{good}, true},
		{"server-only config, no client cert", serverOnly, nil, true},
	} {
		_, err := handshake(tc.addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: tc.certs})
		if (err == nil) != tc.wantOK {
			t.Errorf("%s: handshake error %v, want ok=%v", tc.name, err, tc.wantOK)
		}
	}

	// A CA bundle that is not one is rejected, and the old CA stays.
	testpki.WriteFile(t, caFile, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))
	if _, err := r.Check(); err == nil {
		t.Error("a broken CA bundle was accepted")
	}
	testpki.WriteFile(t, caFile, []byte("# empty\n"))
	if _, err := r.Check(); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("an empty CA bundle: %v", err)
	}
	if _, err := handshake(mtls, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{good}}); err != nil {
		t.Errorf("the old CA no longer admits a good client: %v", err)
	}
	// Rotating the CA to the other one admits its clients instead.
	testpki.WriteFile(t, caFile, other.PEM)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("CA rotation: %v %v", changed, err)
	}
	if _, err := handshake(mtls, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{wrong}}); err != nil {
		t.Errorf("after CA rotation the new CA's client is refused: %v", err)
	}
}

func TestTLS11Refused(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir)
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	addr := tlsServer(t, r.Config())
	_, err = handshake(addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11})
	if err == nil {
		t.Fatal("a TLS 1.1 client completed a handshake")
	}
	t.Logf("TLS 1.1 client: %v", err)
}

func TestNewRejects(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir)
	other := ca.Server(t, "other")
	otherKey := filepath.Join(dir, "other-key.pem")
	testpki.WriteFile(t, otherKey, other.KeyPEM)
	caFile := filepath.Join(dir, "ca.pem")
	testpki.WriteFile(t, caFile, []byte("junk"))
	for _, cfg := range []Config{
		{CertFile: certFile},
		{CertFile: certFile, KeyFile: filepath.Join(dir, "missing.pem")},
		{CertFile: certFile, KeyFile: otherKey},
		{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile},
	} {
		cfg.Interval = -1
		if r, err := New(cfg); err == nil {
			r.Close()
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// VerifyClient judges an established client's chain by the client CAs in
// force now, as a new handshake would; OnReload tells subscribers when they
// changed, after the new CAs are in force.
func TestVerifyClientFollowsReloads(t *testing.T) {
	dir := t.TempDir()
	ca, other := testpki.NewCA(t, "rolloutd CA"), testpki.NewCA(t, "some other CA")
	certFile, keyFile := ca.Server(t, "server").Write(t, dir)
	caFile := filepath.Join(dir, "ca.pem")
	testpki.WriteFile(t, caFile, ca.PEM)
	r, err := New(Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fromCA := []*x509.Certificate{ca.ClientURI(t, "spiffe://test/a").Cert}
	fromOther := []*x509.Certificate{other.ClientURI(t, "spiffe://test/b").Cert}
	serverCert := []*x509.Certificate{ca.Server(t, "not a client").Cert} // no client-auth usage

	var notified []error // VerifyClient(fromCA) at each notification
	r.OnReload(func() { notified = append(notified, r.VerifyClient(fromCA)) })

	if err := r.VerifyClient(fromCA); err != nil {
		t.Errorf("a client of the CA in force: %v", err)
	}
	for name, chain := range map[string][]*x509.Certificate{"another CA's client": fromOther, "a server certificate": serverCert, "no certificate": nil} {
		if err := r.VerifyClient(chain); err == nil {
			t.Errorf("%s verified", name)
		}
	}

	testpki.WriteFile(t, caFile, []byte("# empty\n"))
	r.Check() // rejected: no notification, the CA stays
	testpki.WriteFile(t, caFile, other.PEM)
	if changed, err := r.Check(); !changed || err != nil {
		t.Fatalf("CA rotation: %v %v", changed, err)
	}
	if len(notified) != 1 || notified[0] == nil {
		t.Errorf("notifications %v, want one, with the old CA's client already untrusted", notified)
	}
	if err := r.VerifyClient(fromOther); err != nil {
		t.Errorf("a client of the new CA: %v", err)
	}

	serverOnly, err := New(Config{CertFile: certFile, KeyFile: keyFile, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer serverOnly.Close()
	if err := serverOnly.VerifyClient(fromCA); err == nil {
		t.Error("VerifyClient without client CAs verified")
	}
}
