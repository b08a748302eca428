package main

import (
	"strings"
	"testing"
)

// admin's usage and the errors that name its commands come from the table
// of commands; they read exactly as they did when written by hand.
func TestAdminUsageFromTable(t *testing.T) {
	const usage = `Usage: rolloutd admin <command> [flags]

Commands:
  list      [--prefix P] [--summary]            list the shards under a prefix
                                                (no --prefix: every shard)
  describe  SHARD                               describe one shard
  delete    SHARD [--expected-last-seq N]       delete one shard
  purge     (--prefix P | --all) --older-than D [--dry-run]
            delete every shard under P (with --all, every shard) whose last
            commit is older than D (a duration such as 36h, or days: 30d).
            Each delete passes the last seq purge saw, so a shard written
            since survives. Deleted shards whose storage was not yet
            reclaimed are finished.
  consumers list|describe|reset|delete ...    consumers' stored positions
                                                (rolloutd admin consumers --help)

A prefix is whole '/'-separated segments: "exp" covers exp and exp/run1,
not exp2. '*' is not a prefix.

Every command takes the connection flags (see rolloutd admin list --help).
`
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
		err            string // "" for success
	}{
		{nil, "", usage, "admin: name a command: list, describe, delete, purge or consumers"},
		{[]string{"help"}, usage, "", ""},
		{[]string{"--help"}, usage, "", ""},
		{[]string{"frob"}, "", "", `admin: unknown command "frob": the commands are list, describe, delete, purge and consumers`},
		{[]string{"list", "x"}, "", "", `admin list: takes no arguments, got ["x"] (see rolloutd admin list --help)`},
		{[]string{"describe"}, "", "", "admin describe: name the shard, as in: rolloutd admin describe exp-42/actor-7"},
		{[]string{"delete", "a", "b"}, "", "", `admin delete: takes one shard, got 2: ["a" "b"]`},
		{[]string{"purge", "--all", "--bogus"}, "", "", "admin purge: flag provided but not defined: -bogus (see rolloutd admin purge --help)"},
	} {
		var out, errOut strings.Builder
		err := run(append([]string{"admin"}, tc.args...), &out, &errOut)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if out.String() != tc.stdout || errOut.String() != tc.stderr || gotErr != tc.err {
			t.Errorf("admin %q:\nstdout %q\nstderr %q\nerror  %q\nwant\nstdout %q\nstderr %q\nerror  %q", tc.args, out.String(), errOut.String(), gotErr, tc.stdout, tc.stderr, tc.err)
		}
	}
	// Each command's --help names it, with SHARD when it takes one, and
	// lists its own flags beside the connection flags.
	for _, tc := range []struct{ cmd, head, flag string }{
		{"list", "Usage: rolloutd admin list [flags]\n\nLists the shards", "-summary"},
		{"describe", "Usage: rolloutd admin describe SHARD [flags]\n\nDescribes one shard", "-timeout"},
		{"delete", "Usage: rolloutd admin delete SHARD [flags]\n\nDeletes one shard's", "-expected-last-seq N"},
		{"purge", "Usage: rolloutd admin purge [flags]\n\nDeletes every shard", "-older-than duration"},
	} {
		var out strings.Builder
		if err := run([]string{"admin", tc.cmd, "--help"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), tc.head) || !strings.Contains(out.String(), tc.flag) || !strings.Contains(out.String(), "-addr address") {
			t.Errorf("admin %s --help = %v\n%s", tc.cmd, err, out.String())
		}
	}
}
