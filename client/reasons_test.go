package client_test

import (
	"testing"

	"github.com/rolloutd/rolloutd/client"
	rolloutd "github.com/rolloutd/rolloutd/internal/server"
)

// The client's copies of the ErrorInfo domain, the metadata keys and the
// shard header are the server's. The reasons are not listed: both sides
// take them from rolloutv1.ErrorReason, and TestReasonWireStrings pins them
// as literals on each side.
func TestReasonsAreTheServers(t *testing.T) {
	for mine, theirs := range map[string]string{
		client.ErrorDomain:            rolloutd.ErrorDomain,
		client.MetadataResumeAfterSeq: rolloutd.MetadataResumeAfterSeq,
		client.ShardHeader:            rolloutd.ShardHeader,
		client.MetadataLastSeq:        rolloutd.MetadataLastSeq,
	} {
		if mine != theirs {
			t.Errorf("client has %q, server %q", mine, theirs)
		}
	}
}

// The reasons are constants, as they were before the enum defined them:
// this file does not compile if one becomes a variable, which callers
// could reassign and could not use in a const declaration.
const (
	_ = client.ReasonOutcomeUnknown
	_ = client.ReasonNotCommitted
	_ = client.ReasonBackpressure
	_ = client.ReasonRateLimited
	_ = client.ReasonTooLarge
	_ = client.ReasonScanInterrupted
	_ = client.ReasonShardDeleted
	_ = client.ReasonSeqMismatch
	_ = client.ReasonStoreFull
	_ = client.ReasonConsumerReset
)
