package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":50051" || c.MetricsListen != ":9090" || c.MaxMessageBytes != 16<<20 || c.RecvTimeout != 10*time.Second || c.SendTimeout != 30*time.Second || c.RequestBudgetBytes != 0 || c.LogFormat != "json" ||
		c.store.Container != "" || !strings.HasSuffix(c.store.Dir, "/rolloutd-data") {
		t.Errorf("defaults: %+v", c)
	}
}

// A flag wins over its ROLLOUTD_ variable, which wins over the default.
func TestConfigPrecedence(t *testing.T) {
	c, err := parseConfig([]string{"--max-writers", "7"},
		env("ROLLOUTD_MAX_WRITERS", "9", "ROLLOUTD_SHUTDOWN_TIMEOUT", "45s", "ROLLOUTD_MAX_MESSAGE_BYTES", "32MiB"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxWriters != 7 {
		t.Errorf("max-writers %d, want the flag's 7", c.MaxWriters)
	}
	if c.ShutdownTimeout != 45*time.Second {
		t.Errorf("shutdown-timeout %v, want the env's 45s", c.ShutdownTimeout)
	}
	if c.MaxMessageBytes != 32<<20 {
		t.Errorf("max-message-bytes %v, want 32MiB", c.MaxMessageBytes)
	}
	if c.DrainDelay != 2*time.Second {
		t.Errorf("drain-delay %v, want the default 2s", c.DrainDelay)
	}
}

func TestConfigStore(t *testing.T) {
	tests := []struct {
		args  []string
		env   []string
		dir   string
		cont  string
		pref  string
		azURL string
	}{
		{args: []string{"--store", "file:///var/lib/rolloutd"}, dir: "/var/lib/rolloutd"},
		{args: []string{"--store", "/abs/dir"}, dir: "/abs/dir"},
		{args: []string{"--store", "azblob://rollouts"}, env: []string{"AZURE_STORAGE_CONNECTION_STRING", "x"}, cont: "rollouts"},
		{args: []string{"--store", "azblob://rollouts/envs/prod/"}, env: []string{"AZURE_STORAGE_CONNECTION_STRING", "x"}, cont: "rollouts", pref: "envs/prod"},
		{env: []string{"ROLLOUTD_STORE", "azblob://rollouts", "AZURE_STORAGE_ACCOUNT_URL", "https://acct.blob.core.windows.net/"}, cont: "rollouts", azURL: "https://acct.blob.core.windows.net/"},
	}
	for _, tt := range tests {
		c, err := parseConfig(tt.args, env(tt.env...), io.Discard)
		if err != nil {
			t.Errorf("%v %v: %v", tt.args, tt.env, err)
			continue
		}
		if c.store.Dir != tt.dir || c.store.Container != tt.cont || c.store.Prefix != tt.pref || c.AzureAccountURL != tt.azURL {
			t.Errorf("%v %v: got %+v, account URL %q", tt.args, tt.env, c.store, c.AzureAccountURL)
		}
	}
}

// A bad value fails at startup with a message naming the flag.
func TestConfigRejects(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--max-writers", "0"}, want: "--max-writers"},
		{args: []string{"--max-writers", "many"}, want: "-max-writers"},
		{env: []string{"ROLLOUTD_MAX_WRITERS", "many"}, want: "--max-writers (from ROLLOUTD_MAX_WRITERS)"},
		{args: []string{"--listen", "50051"}, want: "--listen"},
		{args: []string{"--metrics-listen", "nope"}, want: "--metrics-listen"},
		{args: []string{"--store", ""}, want: "--store"},
		{args: []string{"--store", "s3://bucket"}, want: "--store"},
		{args: []string{"--store", "file://relative/path"}, want: "--store"},
		{args: []string{"--store", "azblob://UPPER"}, env: []string{"AZURE_STORAGE_CONNECTION_STRING", "x"}, want: "--store"},
		{args: []string{"--store", "azblob://rollouts"}, want: "AZURE_STORAGE_CONNECTION_STRING"},
		{args: []string{"--store", "azblob://rollouts", "--azure-account-url", "https://a.blob.core.windows.net/"}, env: []string{"AZURE_STORAGE_CONNECTION_STRING", "x"}, want: "both set"},
		{args: []string{"--store", "azblob://rollouts", "--azure-account-url", "acct"}, want: "--azure-account-url"},
		{args: []string{"--max-message-bytes", "64 parsecs"}, want: "-max-message-bytes"},
		{args: []string{"--max-record-bytes", "128MiB"}, want: "--max-record-bytes"},
		{args: []string{"--max-message-bytes", "64MiB", "--request-budget-bytes", "512MiB"}, want: "--request-budget-bytes 512MiB is too small for --max-message-bytes 64MiB: "},
		{args: []string{"--recv-timeout", "0s"}, want: "--recv-timeout"},
		{args: []string{"--send-timeout", "0s"}, want: "--send-timeout"},
		{env: []string{"ROLLOUTD_SEND_TIMEOUT", "soon"}, want: "ROLLOUTD_SEND_TIMEOUT"},
		{args: []string{"--shutdown-timeout", "0s"}, want: "--shutdown-timeout"},
		{args: []string{"--drain-delay", "20s"}, want: "--drain-delay"},
		{args: []string{"--log-format", "xml"}, want: "--log-format"},
		{args: []string{"--log-level", "loud"}, want: "--log-level"},
		{args: []string{"extra"}, want: "unexpected argument"},
	}
	for _, tt := range tests {
		_, err := parseConfig(tt.args, env(tt.env...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v %v: error %v, want one mentioning %q", tt.args, tt.env, err, tt.want)
		}
	}
}

func TestConfigHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseConfig([]string{"--help"}, env(), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, f := range []string{"-listen", "-metrics-listen", "-store", "-azure-account-url", "-max-writers", "-shutdown-timeout",
		"-drain-delay", "-default-deadline", "-max-message-bytes", "-max-batch-records", "-max-record-bytes", "-log-format",
		"-log-level", "-writer-queue-bytes", "-index-cache-bytes", "-request-budget-bytes", "-recv-timeout", "-send-timeout", "ROLLOUTD_"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not explain %s", f)
		}
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1024": 1024, "64KiB": 64 << 10, "64MiB": 64 << 20, "2GiB": 2 << 30, "10B": 10} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1TB", "MiB", "1.5MiB"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted", in)
		}
	}
	if s := byteSize(64 << 20).String(); s != "64MiB" {
		t.Errorf("String() = %q", s)
	}
}
