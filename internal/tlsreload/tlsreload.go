// Package tlsreload serves TLS from a certificate, key and optional client
// CA bundle on disk, and picks up new files without a restart: cert-manager
// and CSI drivers rotate them in place.
//
// Every handshake takes the material in force at that moment, so a
// rotation applies to new connections while established ones keep theirs.
// A rotation that cannot be applied (a key that does not match its
// certificate, a half-written file, an empty CA bundle) is logged and
// ignored: the server keeps serving the last good material, and tries
// again when the files change.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/filewatch"
)

// MinVersion is the oldest TLS version served.
const MinVersion = tls.VersionTLS12

// DefaultInterval is how often the files are checked for changes.
const DefaultInterval = 10 * time.Second

// Config names the files.
type Config struct {
	// CertFile is a PEM certificate chain, leaf first. Required.
	CertFile string
	// KeyFile is the PEM private key of the leaf. Required.
	KeyFile string
	// ClientCAFile is a PEM bundle of the CAs that client certificates
	// must chain to. When set, Config's handshakes require a verified
	// client certificate (mTLS).
	ClientCAFile string
	// Interval is how often the files are checked; 0 means
	// DefaultInterval, negative means only when Check is called.
	Interval time.Duration
	// Logger gets one line per applied or rejected rotation; nil means
	// none.
	Logger *zap.Logger
}

// Reloader holds the TLS material in force and replaces it when the files
// change.
type Reloader struct {
	cfg Config
	cur atomic.Pointer[material]
	w   *filewatch.Watcher
}

// material is one consistent set of certificate, key and client CAs, with
// the tls.Configs built from it.
type material struct {
	leaf       *x509.Certificate
	mtls       *tls.Config // client certificate required when a CA is set
	serverOnly *tls.Config // never asks for a client certificate
	clientCAs  int
	clientPool *x509.CertPool // nil without a ClientCAFile
}

// New loads the files, failing if they are not a valid certificate and
// matching key (and CA bundle), and starts watching them. Call Close to
// stop.
func New(cfg Config) (*Reloader, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tlsreload: a certificate file and a key file are both required")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reloader{cfg: cfg}
	files := []string{cfg.CertFile, cfg.KeyFile}
	if cfg.ClientCAFile != "" {
		files = append(files, cfg.ClientCAFile)
	}
	w, err := filewatch.New(files, cfg.Interval, func(c [][]byte) error {
		var ca []byte
		if len(c) == 3 {
			ca = c[2]
		}
		m, err := parse(cfg, c[0], c[1], ca)
		if err != nil {
			return err
		}
		r.cur.Store(m)
		log.Info("tls: serving certificate", zap.String("subject", m.leaf.Subject.String()),
			zap.Strings("dns_names", m.leaf.DNSNames), zap.String("serial", m.leaf.SerialNumber.String()),
			zap.Time("not_after", m.leaf.NotAfter), zap.Int("client_cas", m.clientCAs))
		return nil
	}, log.With(zap.String("component", "tls")))
	if err != nil {
		return nil, fmt.Errorf("tlsreload: %w", err)
	}
	r.w = w
	return r, nil
}

// parse builds material from PEM bytes.
func parse(cfg Config, certPEM, keyPEM, caPEM []byte) (*material, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", cfg.CertFile, cfg.KeyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.CertFile, err)
		}
	}
	m := &material{
		leaf: leaf,
		serverOnly: &tls.Config{
			MinVersion:   MinVersion,
			Certificates: []tls.Certificate{pair},
		},
	}
	m.mtls = m.serverOnly.Clone()
	if cfg.ClientCAFile != "" {
		pool, n, err := parseCAs(caPEM)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.ClientCAFile, err)
		}
		m.mtls.ClientAuth = tls.RequireAndVerifyClientCert
		m.mtls.ClientCAs = pool
		m.clientCAs = n
		m.clientPool = pool
	}
	return m, nil
}

// parseCAs parses every PEM block of a CA bundle. Unlike
// CertPool.AppendCertsFromPEM it fails on a block it cannot parse, and on a
// bundle with no certificate at all, rather than trusting less than the
// file says or nothing.
func parseCAs(data []byte) (*x509.CertPool, int, error) {
	pool := x509.NewCertPool()
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, 0, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", n+1, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, 0, errors.New("no PEM certificate in the CA bundle")
	}
	return pool, n, nil
}

// Config returns a tls.Config for a server that serves the material in
// force at each handshake. It requires and verifies a client certificate
// when the Reloader has a ClientCAFile. TLS 1.2 is the minimum.
func (r *Reloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load().mtls, nil
		},
	}
}

// ServerOnlyConfig is Config without client authentication: it never asks
// for a client certificate. It suits a metrics endpoint scraped by a client
// without one.
func (r *Reloader) ServerOnlyConfig() *tls.Config {
	return &tls.Config{
		MinVersion: MinVersion,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.cur.Load().serverOnly, nil
		},
	}
}

// VerifyClient verifies a client's certificate chain, as the client
// presented it (leaf first, then intermediates), against the client CAs in
// force now, as a handshake now would: the leaf must chain to one of them,
// be valid at this moment, and allow client authentication. A server calls
// it after a reload to find the established clients the new CAs no longer
// trust. It fails without a ClientCAFile.
func (r *Reloader) VerifyClient(chain []*x509.Certificate) error {
	m := r.cur.Load()
	switch {
	case m.clientPool == nil:
		return errors.New("tlsreload: no client CAs to verify against")
	case len(chain) == 0:
		return errors.New("tlsreload: no client certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         m.clientPool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := chain[0].Verify(opts)
	return err
}

// OnReload registers f to be called after each reload that applied new
// material (not after rejected files), and returns a function that
// unregisters it. f runs on the goroutine that checked the files, after the
// new material is in force; it must be quick and must not call Check.
func (r *Reloader) OnReload(f func()) (unregister func()) { return r.w.OnApply(f) }

// MutualTLS reports whether Config requires client certificates.
func (r *Reloader) MutualTLS() bool { return r.cfg.ClientCAFile != "" }

// NotAfter is the expiry of the certificate in force.
func (r *Reloader) NotAfter() time.Time { return r.cur.Load().leaf.NotAfter }

// Stats reports how many times the material was loaded (the first load
// included) and how many changed files were rejected.
func (r *Reloader) Stats() (loads, failures uint64) { return r.w.Stats() }

// Check checks the files now, as the watcher does every interval. It
// reports whether new material was applied.
func (r *Reloader) Check() (bool, error) { return r.w.Check() }

// Close stops watching the files. The material in force keeps serving.
func (r *Reloader) Close() { r.w.Close() }
