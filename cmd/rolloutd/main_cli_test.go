package main

import (
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
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

// The built binary: `rolloutd version` and `rolloutd --help` exit 0 with
// their output on stdout.
func TestBinaryVersionAndHelp(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--help"}, {"serve", "--help"}} {
		cmd := exec.Command(binary, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || len(out) == 0 || stderr.Len() > 0 {
			t.Errorf("rolloutd %v: %v; %d bytes on stdout; stderr %q", args, err, len(out), stderr.String())
		}
	}
}
