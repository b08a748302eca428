package client_test

import (
	"testing"

	"github.com/rolloutd/rolloutd/client"
	rolloutd "github.com/rolloutd/rolloutd/internal/server"
)

// The client's copies of the ErrorInfo domain, reasons and metadata key
// are the server's.
func TestReasonsAreTheServers(t *testing.T) {
	for mine, theirs := range map[string]string{
		client.ErrorDomain:            rolloutd.ErrorDomain,
		client.ReasonOutcomeUnknown:   rolloutd.ReasonOutcomeUnknown,
		client.ReasonNotCommitted:     rolloutd.ReasonNotCommitted,
		client.ReasonBackpressure:     rolloutd.ReasonBackpressure,
		client.ReasonRateLimited:      rolloutd.ReasonRateLimited,
		client.ReasonTooLarge:         rolloutd.ReasonTooLarge,
		client.ReasonScanInterrupted:  rolloutd.ReasonScanInterrupted,
		client.MetadataResumeAfterSeq: rolloutd.MetadataResumeAfterSeq,
		client.ShardHeader:            rolloutd.ShardHeader,
		client.ReasonShardDeleted:     rolloutd.ReasonShardDeleted,
		client.ReasonSeqMismatch:      rolloutd.ReasonSeqMismatch,
		client.MetadataLastSeq:        rolloutd.MetadataLastSeq,
		client.ReasonStoreFull:        rolloutd.ReasonStoreFull,
	} {
		if mine != theirs {
			t.Errorf("client has %q, server %q", mine, theirs)
		}
	}
}
