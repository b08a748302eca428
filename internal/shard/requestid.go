package shard

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/google/uuid"
)

// requestIDSpace is the UUID namespace of ids derived from request ids. It
// is part of the stored data's meaning: changing it would give a resent
// request new ids, and store its records again.
var requestIDSpace = uuid.MustParse("7d417461-261f-4244-9e13-d7c71483cd59")

// DeriveID returns the id of the record at index in an Append of shard that
// carries requestID, for a record sent without an id. The same three values
// always give the same id, so a resent request carries the same ids and is
// idempotent.
//
// The id is a UUIDv8 (RFC 9562, the name-based SHA-256 construction of its
// appendix B.2): SHA-256 over requestIDSpace and the three values, each
// length-prefixed so that no two triples encode alike, truncated to 128 bits
// with the version and variant bits set. It is 36 characters of hex digits
// and '-', a valid record id.
func DeriveID(shard, requestID string, index int) string {
	name := make([]byte, 0, 3*binary.MaxVarintLen64+len(shard)+len(requestID))
	name = binary.AppendUvarint(name, uint64(len(shard)))
	name = append(name, shard...)
	name = binary.AppendUvarint(name, uint64(len(requestID)))
	name = append(name, requestID...)
	name = binary.AppendUvarint(name, uint64(index))
	return uuid.NewHash(sha256.New(), requestIDSpace, name, 8).String()
}
