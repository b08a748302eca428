package azurite

import (
	"crypto/rsa"
	"crypto/tls"
	"testing"
)

// TestHTTPSWithRSA checks that RSA serves an RSA-2048 certificate, which the
// instance's RootCAs trust, and that blobs round-trip over it.
func TestHTTPSWithRSA(t *testing.T) {
	inst := Start(t, Options{HTTPS: true, RSA: true})
	conn, err := tls.Dial("tcp", inst.Addr, &tls.Config{RootCAs: inst.RootCAs})
	if err != nil {
		t.Fatalf("TLS handshake with the instance's RootCAs: %v", err)
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		t.Fatal("no peer certificate")
	}
	key, ok := certs[0].PublicKey.(*rsa.PublicKey)
	if !ok || key.N.BitLen() != 2048 {
		t.Fatalf("served key %T (%v), want RSA-2048", certs[0].PublicKey, certs[0].PublicKeyAlgorithm)
	}
	if got := roundTrip(t, inst, "rsa", "b", true); got != "hello b" {
		t.Fatalf("read back %q", got)
	}
}

func TestRSANeedsHTTPS(t *testing.T) {
	if inst, err := StartMain(Options{RSA: true}); err == nil {
		_ = inst.Stop()
		t.Fatal("StartMain accepted RSA without HTTPS")
	}
}
