package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// TLSConfig names the PEM files of a TLS or mTLS connection, as the
// Secrets of docs/operations.md hold them (ca.crt, tls.crt, tls.key).
type TLSConfig struct {
	// CAFile holds the CA certificates that verify the server; "" uses the
	// system's roots.
	CAFile string
	// CertFile and KeyFile hold the client's certificate chain and key,
	// for a server that requires client certificates (--tls-client-ca).
	// Both or neither. They are read again for every new connection, so
	// a certificate renewed on disk (cert-manager, csi-driver-spiffe) is
	// used without restarting the client.
	CertFile, KeyFile string
	// ServerName is the name to verify the server's certificate against
	// when it differs from the target's host, for example
	// "rolloutd.rolloutd.svc" through a port-forward.
	ServerName string
}

// credentials builds the transport credentials of c; it reads the files
// once now, so that a mistake fails New rather than the first call.
func (c TLSConfig) credentials() (credentials.TransportCredentials, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s: no PEM certificate", c.CAFile)
		}
	}
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return nil, errors.New("TLS: give both CertFile and KeyFile, or neither")
	case c.CertFile != "":
		if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
			return nil, fmt.Errorf("TLS client certificate: %w", err)
		}
		certFile, keyFile := c.CertFile, c.KeyFile
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("TLS client certificate: %w", err)
			}
			return &cert, nil
		}
	}
	return credentials.NewTLS(tc), nil
}
