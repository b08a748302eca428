package main

import (
	"fmt"

	"go.uber.org/zap"
)

// lastV1Commit is the last commit of rolloutd whose writers could commit
// by manifest CAS (protocol v1): a fleet still on a build before protocol
// v2 upgrades through it (docs/operations.md).
const lastV1Commit = "615b413 (shard: TestStaleWriterWithAFrozenClock lets A's called-for checkpoints land before it counts them and pauses A)"

// checkCommitProtocol checks --commit-protocol (or ROLLOUTD_COMMIT_PROTOCOL).
// v2 stays accepted, as a no-op serve warns about (warnDeprecated), so that
// the configurations of the two-step upgrade do not crash-loop; v1 is
// refused, since this build cannot commit by it.
func checkCommitProtocol(p string) error {
	switch p {
	case "", "v2":
		return nil
	case "v1":
		return fmt.Errorf("--commit-protocol v1: this build commits only by protocol v2; the last commit that had v1 is %s: upgrade a pre-v2 fleet through that commit (docs/operations.md)", lastV1Commit)
	}
	return fmt.Errorf("--commit-protocol %q: want v2 (deprecated: the only protocol) or nothing", p)
}

// warnDeprecated logs the deprecated settings cfg holds.
func (c *config) warnDeprecated(log *zap.Logger) {
	if c.CommitProtocol != "" {
		log.Warn("--commit-protocol (ROLLOUTD_COMMIT_PROTOCOL) is deprecated and does nothing: v2 is the only commit protocol; remove it",
			zap.String("commit_protocol", c.CommitProtocol))
	}
}
