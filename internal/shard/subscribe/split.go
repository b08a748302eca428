package subscribe

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Member is which of members members takes shard, by rendezvous (highest
// random weight) hashing: the j in [0, members) whose weight
//
//	XXH64(seed 0) of: the shard name's bytes, one zero byte, then j as
//	4 bytes big-endian
//
// is highest, the lowest such j on a tie. With 0 or 1 members it is 0.
// Any language with XXH64 reproduces it (Python:
// xxhash.xxh64(shard.encode() + b"\0" + j.to_bytes(4, "big")).intdigest()).
//
// Each shard's choice depends on its name and n alone, so members agree
// with no coordinator, and going from n to n+1 members moves only the
// shards that member n now wins, about 1/(n+1) of them.
func Member(shard string, members uint32) uint32 {
	if members <= 1 {
		return 0
	}
	key := make([]byte, len(shard)+5)
	copy(key, shard)
	var best uint32
	var bestWeight uint64
	for j := range members {
		binary.BigEndian.PutUint32(key[len(shard)+1:], j)
		if w := xxhash.Sum64(key); j == 0 || w > bestWeight {
			best, bestWeight = j, w
		}
	}
	return best
}

// Takes reports whether member of members reads shard: every member
// reads every shard with 0 or 1 members.
func Takes(shard string, member, members uint32) bool {
	return members <= 1 || Member(shard, members) == member
}
