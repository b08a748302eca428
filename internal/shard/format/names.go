package format

import (
	"strconv"
	"strings"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The blob layout of one shard:
//
//	shards/<shard>/_manifest
//	shards/<shard>/_g/<epoch as 16 hex digits>-<generation as 16 hex digits>
//	shards/<shard>/_l/<log position as 16 hex digits>   (protocol v2)
//
// A shard segment starts with a letter or digit (package validate), so the
// "_" names can never collide with a nested shard's prefix: shard "a" and
// shard "a/manifest" live side by side, on Azure and on a local disk. Fixed-
// width hex keeps a listing of generations in (epoch, generation) order.
const (
	shardsRoot     = "shards/"
	manifestSuffix = "/_manifest"
	genDir         = "/_g/"
	logDir         = "/_l/"
)

// LogPrefix is the prefix of the shard's commit log (protocol v2).
func LogPrefix(shard string) string { return shardsRoot + shard + logDir }

// LogName names the log entry at position (1, 2, 3, ...).
func LogName(shard string, position uint64) string {
	return blobName(shard, logDir, position)
}

// blobName is the name of a blob in the shard's directory dir, named by
// nums as 16 lowercase hex digits each (%016x), joined by '-'. Every
// commit names its position, and its index names it again: it is built
// by hand, in one allocation, rather than through fmt.
func blobName(shard, dir string, nums ...uint64) string {
	const digits = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(shardsRoot) + len(shard) + len(dir) + 17*len(nums))
	b.WriteString(shardsRoot)
	b.WriteString(shard)
	b.WriteString(dir)
	for i, v := range nums {
		if i > 0 {
			b.WriteByte('-')
		}
		var buf [16]byte
		for j := 15; j >= 0; j-- {
			buf[j] = digits[v&0xf]
			v >>= 4
		}
		b.Write(buf[:])
	}
	return b.String()
}

// ParseLogName is the inverse of LogName.
func ParseLogName(shard, name string) (position uint64, ok bool) {
	rest, found := strings.CutPrefix(name, LogPrefix(shard))
	if !found || len(rest) != 16 {
		return 0, false
	}
	p, err := strconv.ParseUint(rest, 16, 64)
	if err != nil || p == 0 {
		return 0, false
	}
	return p, true
}

// ShardsRoot is the prefix of every shard's blobs.
const ShardsRoot = shardsRoot

// ShardPrefix is the prefix under which every blob of the shard lives. The
// shard must already be valid (package validate).
func ShardPrefix(shard string) string { return shardsRoot + shard + "/" }

// ManifestName is the name of the shard's manifest blob.
func ManifestName(shard string) string { return shardsRoot + shard + manifestSuffix }

// GenerationPrefix is the prefix of all generation blobs of the shard.
func GenerationPrefix(shard string) string { return shardsRoot + shard + genDir }

// GenerationName names the generation blob written under epoch with number gen.
func GenerationName(shard string, epoch, gen uint64) string {
	return blobName(shard, genDir, epoch, gen)
}

// ParseGenerationName is the inverse of GenerationName.
func ParseGenerationName(shard, name string) (epoch, gen uint64, ok bool) {
	rest, found := strings.CutPrefix(name, GenerationPrefix(shard))
	if !found || len(rest) != 33 || rest[16] != '-' {
		return 0, 0, false
	}
	e, err1 := strconv.ParseUint(rest[:16], 16, 64)
	g, err2 := strconv.ParseUint(rest[17:], 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return e, g, true
}

// GenKey names a generation: its epoch and number, or, for a batch in the
// shard's log (protocol v2), epoch 0 and its log position. No generation
// has epoch 0, and the retired list stores log positions the same way.
type GenKey struct{ Epoch, Number uint64 }

// KeyOf returns the key of generation g.
func KeyOf(g *storagepb.Generation) GenKey {
	if p := g.GetPosition(); p != 0 {
		return GenKey{0, p}
	}
	return GenKey{g.GetEpoch(), g.GetNumber()}
}

// Blob names the blob that holds generation k of the shard: a log
// position's, or a generation's. It is the one function that names a
// generation's blob.
func (k GenKey) Blob(shard string) string {
	if k.Epoch == 0 {
		return LogName(shard, k.Number)
	}
	return GenerationName(shard, k.Epoch, k.Number)
}

// IsDataBlob reports whether name is one of the shard's record blobs: a
// generation, or a log position.
func IsDataBlob(shard, name string) bool {
	return strings.HasPrefix(name, GenerationPrefix(shard)) || strings.HasPrefix(name, LogPrefix(shard))
}
