package main

import (
	"errors"
	"flag"
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
)

// rolloutd with no subcommand or with flags only serves; a name picks a
// subcommand; --version and version print the same three lines; every
// command's --help goes to stdout and succeeds.
func TestRunDispatch(t *testing.T) {
	versionOut := regexp.MustCompile(`^rolloutd \S+\ncommit: \S+\ngo: ` + regexp.QuoteMeta(runtime.Version()) + ` \S+/\S+\n$`)
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}, {"serve", "--version"}} {
		var out, errOut strings.Builder
		if err := run(args, &out, &errOut); err != nil {
			t.Errorf("%v: %v", args, err)
		}
		if !versionOut.MatchString(out.String()) || errOut.Len() > 0 {
			t.Errorf("%v: stdout %q, stderr %q; want version, commit and Go version on stdout", args, out.String(), errOut.String())
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"serve", "--help"}, {"version", "--help"}} {
		var out, errOut strings.Builder
		if err := run(args, &out, &errOut); err != nil {
			t.Errorf("%v: %v, want success", args, err)
		}
		if out.Len() == 0 || errOut.Len() > 0 {
			t.Errorf("%v: %d bytes on stdout, stderr %q; want the help on stdout", args, out.Len(), errOut.String())
		}
	}
	for name := range commands {
		var out strings.Builder
		if err := run([]string{name, "--help"}, &out, io.Discard); err != nil || out.Len() == 0 {
			t.Errorf("rolloutd %s --help: %v, %d bytes on stdout", name, err, out.Len())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
		{[]string{"--max-writers", "x"}, "-max-writers"},
	} {
		if err := run(tc.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.want)
		}
	}
	// The top-level help lists the subcommands.
	var out strings.Builder
	_ = run([]string{"--help"}, &out, io.Discard)
	for name := range commands {
		if !regexp.MustCompile(`(?m)^  ` + name + ` `).MatchString(out.String()) {
			t.Errorf("rolloutd --help does not list the command %s:\n%s", name, out.String())
		}
	}
}

// A duration or integer that does not parse fails with the format it
// wants, from a flag and from its variable; the help still names each
// flag's type and default.
func TestConfigParseErrorsShowTheFormat(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--shutdown-timeout", "30"}, want: "want a duration such as 30s"},
		{args: []string{"--reload-interval", "soon"}, want: "want a duration such as 30s"},
		{env: []string{"ROLLOUTD_DRAIN_DELAY", "5"}, want: "--drain-delay (from ROLLOUTD_DRAIN_DELAY): want a duration such as 30s"},
		{args: []string{"--max-writers", "1e3"}, want: "want a whole number such as 1024"},
		{env: []string{"ROLLOUTD_AZURE_MAX_CONNS", "many"}, want: "--azure-max-conns (from ROLLOUTD_AZURE_MAX_CONNS): want a whole number"},
		{args: []string{"--keepalive-permit-without-stream=maybe"}, want: "-keepalive-permit-without-stream"},
		{args: []string{"--commit-protocol=v3"}, want: "--commit-protocol \"v3\": want v2"},
	} {
		_, err := parseConfig(tc.args, env(tc.env...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: error %v, want one mentioning %q", tc.args, tc.env, err, tc.want)
		}
	}
	// Bool flags stay bool flags: --disable-merge takes no value.
	if c, err := parseConfig([]string{"--disable-merge", "--max-writers", "3"}, env(), io.Discard); err != nil || !c.DisableMerge || c.MaxWriters != 3 {
		t.Errorf("--disable-merge --max-writers 3: %+v, %v", c, err)
	}
	var out strings.Builder
	if _, err := parseConfig([]string{"--help"}, env(), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	for _, want := range []string{"-max-writers int\n", "-shutdown-timeout duration\n", "(default 30s)", "(default 64)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// Every ROLLOUTD_* variable that names no flag is reported, by name only;
// the variables Kubernetes injects for a Service named rolloutd are not.
func TestUnknownEnvVars(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"ROLLOUTD_MAX_WRITERS=7", "ROLLOUTD_MAX_WRITER=7", "ROLLOUTD_AZURE_CONNECTION_STRING=secret", "PATH=/bin",
		"ROLLOUTD_SERVICE_HOST=10.0.0.1", "ROLLOUTD_SERVICE_PORT=50051", "ROLLOUTD_SERVICE_PORT_GRPC=50051",
		"ROLLOUTD_PORT=tcp://10.0.0.1:50051", "ROLLOUTD_PORT_50051_TCP_ADDR=10.0.0.1", "ROLLOUTD_MAX_WRITER=8",
		"ROLLOUTD_LOG_LEVEL=debug", "AZURE_STORAGE_ACCOUNT_URL=https://a.blob.core.windows.net/",
		"ROLLOUTD_ADDR=rolloutd:50051", // the client commands' address: known, not serve's
	}
	got := strings.Join(unknownEnvVars(environ, c.flagNames), " ")
	if want := "ROLLOUTD_AZURE_CONNECTION_STRING ROLLOUTD_MAX_WRITER"; got != want {
		t.Errorf("unknown variables %q, want %q", got, want)
	}
}

// The built binary: `rolloutd version` and `rolloutd --help` exit 0 with
// their output on stdout, and a misspelled ROLLOUTD_ variable is logged as
// ignored, by name, while the service links are not.
func TestBinaryVersionHelpAndUnknownEnv(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--help"}, {"serve", "--help"}} {
		cmd := exec.Command(binary, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || len(out) == 0 || stderr.Len() > 0 {
			t.Errorf("rolloutd %v: %v; %d bytes on stdout; stderr %q", args, err, len(out), stderr.String())
		}
	}
	p := start(t, []string{"ROLLOUTD_MAX_WRITER=5", "ROLLOUTD_SERVICE_PORT_GRPC=50051"}, "--store", t.TempDir())
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Output(), `"name":"ROLLOUTD_MAX_WRITER"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about ROLLOUTD_MAX_WRITER:\n%s", p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(p.Output(), "ROLLOUTD_SERVICE_PORT_GRPC") {
		t.Errorf("warned about a Kubernetes service link:\n%s", p.Output())
	}
}

// --help names every RPC of the service and --authz-file every verb a
// grant can allow.
func TestHelpNamesEveryRPCAndVerb(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"--help"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	methods := rolloutv1.File_rollout_v1_rollout_proto.Services().ByName("RolloutService").Methods()
	for i := range methods.Len() {
		if name := string(methods.Get(i).Name()); !regexp.MustCompile(`\b` + name + `\b`).MatchString(help) {
			t.Errorf("--help does not name the RPC %s:\n%s", name, help)
		}
	}
	_, authzHelp, _ := strings.Cut(help, "\n  -authz-file ")
	authzHelp, _, _ = strings.Cut(authzHelp, "\n  -")
	for _, v := range authz.Verbs {
		if !regexp.MustCompile(`\b` + string(v) + `\b`).MatchString(authzHelp) {
			t.Errorf("--authz-file's help does not name the verb %s: %q", v, authzHelp)
		}
	}
	// Tracing has no flag: the help is where a reader of it learns that the
	// OTEL_* variables turn it on.
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if !strings.Contains(help, v) {
			t.Errorf("--help does not name %s, which turns tracing on", v)
		}
	}
}
