package main

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is the release this binary was built from, stamped at build time
// with -ldflags "-X main.version=..." (see the Dockerfile); "dev" otherwise.
var version = "dev"

// commit may be stamped like version (-X main.commit=...). Without it,
// the commit is the build's vcs.revision, which go build records only when
// it builds inside a Git checkout without -buildvcs=false.
var commit = ""

// errPrintVersion is parseConfig's answer to --version.
var errPrintVersion = errors.New("print the version")

func init() {
	register(&command{
		name:    "version",
		summary: "print the version, the commit and the Go version, then exit",
		run:     runVersion,
	})
}

func runVersion(args []string, stdout, _ io.Writer) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, "Usage: rolloutd version (or rolloutd --version)\n\nPrints the version, the commit and the Go version rolloutd was built with.\n")
			return nil
		}
	}
	if len(args) > 0 {
		return fmt.Errorf("version: unexpected argument %q (see rolloutd version --help)", args[0])
	}
	printVersion(stdout)
	return nil
}

func printVersion(w io.Writer) {
	fmt.Fprintf(w, "rolloutd %s\ncommit: %s\ngo: %s %s/%s\n", version, buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildCommit is the stamped commit, else the build's vcs.revision (with
// "+modified" for a dirty tree), else "unknown".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified == "true" {
		rev += "+modified"
	}
	return rev
}
