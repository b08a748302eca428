package format

import (
	"fmt"
	"strconv"
	"strings"
)

// The blob layout of one shard:
//
//	shards/<shard>/_manifest
//	shards/<shard>/_g/<epoch as 16 hex digits>-<generation as 16 hex digits>
//
// A shard segment starts with a letter or digit (package validate), so the
// "_" names can never collide with a nested shard's prefix: shard "a" and
// shard "a/manifest" live side by side, on Azure and on a local disk. Fixed-
// width hex keeps a listing of generations in (epoch, generation) order.
const (
	shardsRoot     = "shards/"
	manifestSuffix = "/_manifest"
	genDir         = "/_g/"
)

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
	return fmt.Sprintf("%s%016x-%016x", GenerationPrefix(shard), epoch, gen)
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
