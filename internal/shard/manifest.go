package shard

import (
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// hasLog reports whether m is a protocol v2 manifest, a checkpoint of the
// log, rather than a v1 shard that no claim has converted yet.
func hasLog(m *storagepb.Manifest) bool { return m.GetProtocol() == format.ProtocolV2 }
