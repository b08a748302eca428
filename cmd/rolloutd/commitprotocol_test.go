package main

import (
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// --commit-protocol and ROLLOUTD_COMMIT_PROTOCOL: v2 is a deprecated no-op
// that serve warns about, so that a configuration from the two-step
// upgrade does not crash-loop; v1 is refused with the last commit that had
// it, through which a pre-v2 fleet upgrades.
func TestCommitProtocolV2IsADeprecatedNoOpAndV1IsRefused(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args, env []string
		wantErr   string // "" when accepted
		wantWarn  bool
	}{
		{name: "unset"},
		{name: "flag v2", args: []string{"--commit-protocol=v2"}, wantWarn: true},
		{name: "env v2", env: []string{"ROLLOUTD_COMMIT_PROTOCOL", "v2"}, wantWarn: true},
		{name: "flag v1", args: []string{"--commit-protocol=v1"}, wantErr: "--commit-protocol v1"},
		{name: "env v1", env: []string{"ROLLOUTD_COMMIT_PROTOCOL", "v1"}, wantErr: "--commit-protocol v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, env(tc.env...), io.Discard)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatal("accepted; want refused")
				}
				for _, want := range []string{tc.wantErr, "615b413 (shard: TestStaleWriterWithAFrozenClock", "upgrade a pre-v2 fleet through that commit"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not mention %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.WarnLevel)
			c.warnDeprecated(zap.New(core))
			warned := logs.FilterMessageSnippet("--commit-protocol").Len() == 1
			if warned != tc.wantWarn {
				t.Fatalf("warned %t, want %t (logs: %v)", warned, tc.wantWarn, logs.All())
			}
			if warned && logs.All()[0].ContextMap()["commit_protocol"] != "v2" {
				t.Errorf("warning %v does not carry commit_protocol v2", logs.All()[0].ContextMap())
			}
		})
	}
}
