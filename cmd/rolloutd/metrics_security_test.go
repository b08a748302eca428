package main

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// metricsPKI is a server certificate and a client CA on disk.
type metricsPKI struct {
	serverCA, clientCA    *testpki.CA
	certFile, keyFile, ca string
}

func newMetricsPKI(t *testing.T) *metricsPKI {
	dir := t.TempDir()
	p := &metricsPKI{serverCA: testpki.NewCA(t, "server CA"), clientCA: testpki.NewCA(t, "client CA"), ca: filepath.Join(dir, "client-ca.pem")}
	p.certFile, p.keyFile = p.serverCA.Server(t, "server-1").Write(t, dir)
	testpki.WriteFile(t, p.ca, p.clientCA.PEM)
	return p
}

// serveMetrics parses args (plus a temporary --store), builds the security
// of the config, and serves the debug handler on the metrics listener it
// wraps, on loopback. It returns the address and the log.
func serveMetrics(t *testing.T, args ...string) (string, *observer.ObservedLogs) {
	t.Helper()
	cfg, err := parseConfig(append([]string{"--store", t.TempDir()}, args...), env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	reg := prometheus.NewRegistry()
	sec, err := newSecurity(cfg, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sec.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: server.DebugHandler(reg, cfg.Pprof), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(sec.metricsListener(lis, log)) }()
	t.Cleanup(func() {
		hs.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("metrics server: %v", err)
		}
	})
	return lis.Addr().String(), logs
}

// get fetches path from addr over TLS, trusting p's server CA and
// presenting leaf (none when nil); it returns the status code.
func (p *metricsPKI) get(t *testing.T, addr, path string, leaf *testpki.Leaf) (int, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.serverCA.Pool(), ServerName: "localhost"}
	if leaf != nil {
		cfg.Certificates = []tls.Certificate{leaf.TLS(t)}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://" + addr + path)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Under --metrics-tls mtls only the named scrapers get through: another
// certificate from the client CA (any client workload's) fails the
// handshake, as does a common name equal to a granted DNS name.
func TestMetricsMutualTLSAdmitsOnlyNamedScrapers(t *testing.T) {
	p := newMetricsPKI(t)
	const scraper = "spiffe://e2e/ns/monitoring/sa/prometheus"
	addr, logs := serveMetrics(t, "--tls-cert", p.certFile, "--tls-key", p.keyFile, "--tls-client-ca", p.ca,
		"--metrics-tls", "mtls", "--metrics-client-identity", scraper+",dns:scraper.example", "--pprof")

	for _, tc := range []struct {
		name string
		leaf *testpki.Leaf
		ok   bool
	}{
		{"the named scraper (URI SAN)", p.clientCA.ClientURI(t, scraper), true},
		{"the named scraper (DNS SAN)", p.clientCA.ClientDNS(t, "scraper.example"), true},
		{"a trainer from the same client CA", p.clientCA.ClientURI(t, "spiffe://e2e/ns/team-a/sa/trainer"), false},
		{"a common name equal to the scraper's DNS name", p.clientCA.ClientCN(t, "scraper.example"), false},
		{"a common name spelling the scraper's SPIFFE ID", p.clientCA.ClientCN(t, scraper), false},
		{"no certificate", nil, false},
	} {
		for _, path := range []string{"/metrics", "/debug/pprof/"} {
			code, err := p.get(t, addr, path, tc.leaf)
			if tc.ok && (err != nil || code != http.StatusOK) {
				t.Errorf("%s, %s: %d %v, want 200", tc.name, path, code, err)
			}
			if !tc.ok && err == nil {
				t.Errorf("%s, %s: %d, want a failed handshake", tc.name, path, code)
			}
		}
	}
	if n := logs.FilterMessageSnippet("not a --metrics-client-identity").Len(); n == 0 {
		t.Error("refused scrapers are not logged")
	}
	if n := logs.FilterMessageSnippet("--pprof").Len(); n != 0 {
		t.Errorf("a pprof warning under mtls: %v", logs.FilterMessageSnippet("--pprof").All())
	}
}

// --pprof is off by default; turned on without client certificates on the
// metrics listener (plaintext, or TLS without client authentication), it
// is warned about at startup, in plaintext development mode too.
func TestPprofFlag(t *testing.T) {
	p := newMetricsPKI(t)
	for _, tc := range []struct {
		name  string
		args  []string
		tls   bool
		pprof bool
		warn  bool
	}{
		{"default: plaintext, no pprof", nil, false, false, false},
		{"plaintext with pprof", []string{"--pprof"}, false, true, true},
		{"TLS metrics with pprof", []string{"--tls-cert", p.certFile, "--tls-key", p.keyFile, "--metrics-tls", "tls", "--pprof"}, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, logs := serveMetrics(t, append([]string{"--metrics-listen", "127.0.0.1:0"}, tc.args...)...)
			var code int
			if tc.tls {
				var err error
				if code, err = p.get(t, addr, "/debug/pprof/", nil); err != nil {
					t.Fatal(err)
				}
			} else {
				resp, err := http.Get("http://" + addr + "/debug/pprof/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				code = resp.StatusCode
			}
			if want := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[tc.pprof]; code != want {
				t.Errorf("/debug/pprof/: %d, want %d", code, want)
			}
			warned := logs.FilterMessageSnippet("--pprof").Len() > 0
			if warned != tc.warn {
				t.Errorf("warned %v, want %v: %v", warned, tc.warn, logs.All())
			}
		})
	}
}
