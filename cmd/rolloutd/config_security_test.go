package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSecurityConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := c.securityConfig
	if s.TLSCert != "" || s.TLSClientCA != "" || s.AuthzFile != "" || s.HealthListen != "" || s.MetricsTLS != "off" || s.Pprof || len(s.MetricsClientIdentities) != 0 ||
		s.MaxConcurrentStreams != 256 || s.KeepaliveMinTime != 10*time.Second || !s.KeepalivePermitWithoutStream ||
		s.MaxConnectionAge != 10*time.Minute || s.MaxConnectionAgeGrace != time.Minute || s.AppendRateLimit != 0 ||
		s.ReloadInterval != 10*time.Second {
		t.Errorf("defaults: %+v", s)
	}
}

func TestSecurityConfig(t *testing.T) {
	c, err := parseConfig([]string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-client-ca", "ca.pem", "--authz-file", "p.yaml",
		"--health-listen", ":8081", "--metrics-tls", "mtls", "--append-rate-limit", "1MiB",
		"--metrics-client-identity", "spiffe://c/ns/monitoring/sa/prometheus, DNS:scraper.example", "--metrics-client-identity", "cn:Old Scraper"},
		env("ROLLOUTD_KEEPALIVE_MIN_TIME", "30s", "ROLLOUTD_PPROF", "true"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"uri:spiffe://c/ns/monitoring/sa/prometheus", "dns:scraper.example", "cn:Old Scraper"}; !slices.Equal(c.MetricsClientIdentities, want) {
		t.Errorf("metrics client identities %q, want %q", c.MetricsClientIdentities, want)
	}
	if !c.Pprof {
		t.Error("ROLLOUTD_PPROF=true did not turn --pprof on")
	}
	if c.AppendRateBurst != 16<<20 {
		t.Errorf("burst %v, want the larger of the limit and --max-message-bytes (16MiB)", c.AppendRateBurst)
	}
	if c.KeepaliveMinTime != 30*time.Second {
		t.Errorf("keepalive-min-time %v, want the env's 30s", c.KeepaliveMinTime)
	}
	c, err = parseConfig([]string{"--append-rate-limit", "128MiB", "--append-rate-burst", "1MiB"}, env(), io.Discard)
	if err != nil || c.AppendRateBurst != 1<<20 {
		t.Errorf("explicit burst: %v %v", c, err)
	}
}

func TestSecurityConfigRejects(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--tls-cert", "c.pem"}, want: "--tls-cert and --tls-key"},
		{args: []string{"--tls-key", "k.pem"}, want: "--tls-cert and --tls-key"},
		{args: []string{"--tls-client-ca", "ca.pem"}, want: "--tls-client-ca needs"},
		{args: []string{"--tls-cert", "c", "--tls-key", "k", "--authz-file", "p.yaml"}, want: "--authz-file needs --tls-client-ca"},
		{args: []string{"--metrics-tls", "tls"}, want: "--metrics-tls tls needs"},
		{args: []string{"--tls-cert", "c", "--tls-key", "k", "--metrics-tls", "mtls"}, want: "--metrics-tls mtls needs --tls-client-ca"},
		{args: []string{"--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca", "--metrics-tls", "mtls"}, want: "--metrics-tls mtls needs --metrics-client-identity"},
		{args: []string{"--tls-cert", "c", "--tls-key", "k", "--metrics-tls", "tls", "--metrics-client-identity", "dns:x"}, want: "--metrics-client-identity needs --metrics-tls mtls"},
		{args: []string{"--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca", "--metrics-tls", "mtls", "--metrics-client-identity", "Prometheus Scraper"}, want: `write "cn:Prometheus Scraper"`},
		{args: []string{"--tls-cert", "c", "--tls-key", "k", "--tls-client-ca", "ca", "--metrics-tls", "mtls", "--metrics-client-identity", "uri:"}, want: "--metrics-client-identity"},
		{args: []string{"--pprof=maybe"}, want: "-pprof"},
		{env: []string{"ROLLOUTD_PPROF", "maybe"}, want: "--pprof (from ROLLOUTD_PPROF)"},
		{args: []string{"--metrics-tls", "yes"}, want: "--metrics-tls"},
		{args: []string{"--health-listen", "8081"}, want: "--health-listen"},
		{args: []string{"--keepalive-min-time", "0s"}, want: "--keepalive-min-time"},
		{args: []string{"--max-concurrent-streams", "0"}, want: "--max-concurrent-streams"},
		{args: []string{"--max-connection-age-grace", "0s"}, want: "--max-connection-age"},
		{args: []string{"--reload-interval", "0s"}, want: "--reload-interval"},
		{args: []string{"--append-rate-burst", "1MiB"}, want: "--append-rate-burst needs --append-rate-limit"},
		// No flag takes the connection string itself: flags show in ps.
		{args: []string{"--azure-connection-string", "AccountKey=x"}, want: "flag provided but not defined"},
		{args: []string{"--azure-connection-string-file", filepath.Join(dir, "missing")}, want: "--azure-connection-string-file"},
		{args: []string{"--azure-connection-string-file", empty}, want: "empty"},
		{args: []string{"--azure-connection-string-file", empty}, env: []string{"AZURE_STORAGE_CONNECTION_STRING", "x"}, want: "both set"},
	} {
		_, err := parseConfig(tt.args, env(tt.env...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v %v: error %v, want one mentioning %q", tt.args, tt.env, err, tt.want)
		}
	}
}

// The Azure connection string comes only from the environment or a file,
// and a production setup (workload identity: an account URL) needs no key
// at all.
func TestAzureCredentialSources(t *testing.T) {
	const connStr = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=c2VjcmV0;BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
	file := filepath.Join(t.TempDir(), "conn")
	if err := os.WriteFile(file, []byte(connStr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"--store", "azblob://rollouts", "--azure-connection-string-file", file}, env(), io.Discard)
	if err != nil || c.azureConn != connStr {
		t.Fatalf("from a file: %v, %q", err, c.azureConn)
	}
	c, err = parseConfig([]string{"--store", "azblob://rollouts"}, env("ROLLOUTD_AZURE_CONNECTION_STRING_FILE", file), io.Discard)
	if err != nil || c.azureConn != connStr {
		t.Fatalf("file named by env: %v, %q", err, c.azureConn)
	}
	// A connection string in a ROLLOUTD_ variable is not read: only
	// AZURE_STORAGE_CONNECTION_STRING is.
	if _, err := parseConfig([]string{"--store", "azblob://rollouts"}, env("ROLLOUTD_AZURE_CONNECTION_STRING", connStr), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "needs credentials") {
		t.Errorf("ROLLOUTD_AZURE_CONNECTION_STRING: %v", err)
	}
	// Production: an account URL, no connection string, no key anywhere.
	c, err = parseConfig([]string{"--store", "azblob://rollouts", "--azure-account-url", "https://acct.blob.core.windows.net/"}, env(), io.Discard)
	if err != nil || c.azureConn != "" {
		t.Fatalf("workload identity: %v, connection string %q", err, c.azureConn)
	}
	// The connection string never reaches an error message.
	for _, args := range [][]string{
		{"--store", "azblob://rollouts", "--azure-connection-string-file", file, "--azure-account-url", "https://acct.blob.core.windows.net/"},
		{"--store", "azblob://UPPER", "--azure-connection-string-file", file},
	} {
		if _, err := parseConfig(args, env(), io.Discard); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

func TestSecurityHelp(t *testing.T) {
	var out strings.Builder
	if _, err := parseConfig([]string{"--help"}, env(), &out); err == nil {
		t.Fatal("--help returned no error")
	}
	for _, f := range []string{"-tls-cert", "-tls-key", "-tls-client-ca", "-authz-file", "-reload-interval", "-health-listen", "-metrics-tls", "-metrics-client-identity", "-pprof",
		"-max-concurrent-streams", "-keepalive-min-time", "-keepalive-permit-without-stream", "-max-connection-age", "-max-connection-age-grace",
		"-append-rate-limit", "-append-rate-burst", "-azure-connection-string-file"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not explain %s", f)
		}
	}
}
