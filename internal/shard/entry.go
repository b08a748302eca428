package shard

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Entry is one record made ready to append: its id, its stored encoding
// without a sequence number, and the hash of the client's own encoding.
//
// Prepare an Entry once, when a request arrives, and reuse it for every
// internal retry: the id it assigns and the hash it takes must not change
// between attempts, or a retry of a landed commit would look like a new
// record.
type Entry struct {
	ID         string
	Data       []byte
	ClientHash uint64
}

// Field numbers of rollout.v1.Record that the server fills.
const (
	fieldID        = 1
	fieldSeq       = 2
	fieldCreatedAt = 8
)

// Prepare encodes rec for storage. It hashes the record as the client sent it
// (ignoring seq, which is output-only), then fills what the server owns: a
// UUIDv7 id when the id is empty and created_at (now) when it is absent. rec
// is not modified.
func Prepare(rec *rolloutv1.Record, now time.Time) (Entry, error) {
	return PrepareWithID(rec, "", now)
}

// PrepareWithID is Prepare, except that a record without an id gets id
// instead of a UUIDv7 when id is not empty: the server passes DeriveID's id
// for an Append that carries a request id. id must be a valid record id. As
// with any id the server fills, the client hash does not cover it, so a
// resent record matches its stored copy, and different content under the
// same id conflicts.
func PrepareWithID(rec *rolloutv1.Record, id string, now time.Time) (Entry, error) {
	if rec.GetSeq() != 0 {
		rec = proto.CloneOf(rec)
		rec.Seq = 0
	}
	// One buffer with room for the fields the server fills: appending
	// them to an exactly sized encoding grew and copied it again.
	mo := proto.MarshalOptions{Deterministic: true}
	n := mo.Size(rec)
	room := 0
	if rec.GetId() == "" {
		room += protowire.SizeTag(fieldID) + protowire.SizeBytes(max(len(id), uuidLen))
	}
	var ts []byte
	if rec.GetCreatedAt() == nil {
		ts = appendTimestamp(make([]byte, 0, maxTimestampLen), now)
		room += protowire.SizeTag(fieldCreatedAt) + protowire.SizeBytes(len(ts))
	}
	mo.UseCachedSize = true
	data, err := mo.MarshalAppend(make([]byte, 0, n+room), rec)
	if err != nil {
		return Entry{}, fmt.Errorf("encode record %q: %w", rec.GetId(), err)
	}
	e := Entry{ID: rec.GetId(), ClientHash: clientHash(data)}
	// The filled fields are absent from data, so appending them yields the
	// same message as setting them before marshalling.
	if e.ID == "" {
		e.ID = id
		if e.ID == "" {
			v7, err := uuid.NewV7()
			if err != nil {
				return Entry{}, fmt.Errorf("assign record id: %w", err)
			}
			e.ID = v7.String()
		}
		data = protowire.AppendTag(data, fieldID, protowire.BytesType)
		data = protowire.AppendString(data, e.ID)
	}
	if ts != nil {
		data = protowire.AppendTag(data, fieldCreatedAt, protowire.BytesType)
		data = protowire.AppendBytes(data, ts)
	}
	e.Data = data
	return e, nil
}

// uuidLen is the length of a UUID's string form, the id Prepare assigns.
const uuidLen = 36

// clientHash is FNV-1a (64-bit) of a record's encoding, as hash/fnv computes
// it, without its allocation and calls through an interface. Stored
// footers keep it, and a resent record is matched by it, so its value
// must never change.
func clientHash(data []byte) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for _, c := range data {
		h ^= uint64(c)
		h *= prime64
	}
	return h
}

// maxTimestampLen bounds the encoding of a google.protobuf.Timestamp: two
// tags and two varints of at most ten bytes.
const maxTimestampLen = 2 + 2*binary.MaxVarintLen64

// appendTimestamp appends proto.Marshal(timestamppb.New(t)): seconds
// (field 1) and nanos (field 2) as varints, each left out when zero, as
// proto3 encodes them.
func appendTimestamp(dst []byte, t time.Time) []byte {
	if s := t.Unix(); s != 0 {
		dst = protowire.AppendTag(dst, 1, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(s))
	}
	if ns := int32(t.Nanosecond()); ns != 0 {
		dst = protowire.AppendTag(dst, 2, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(int64(ns)))
	}
	return dst
}

// size is what e counts for in the writer's queue, against a generation's
// size limit, and in the estimate of the generation a commit writes, which
// bounds the bytes it may fold beside it.
func (e Entry) size() int64 { return int64(len(e.Data)) + int64(len(e.ID)) }

// seqField appends the field that stores a record's sequence number: a
// stored record is its Entry's Data followed by it.
func seqField(dst []byte, seq uint64) []byte {
	dst = protowire.AppendTag(dst, fieldSeq, protowire.VarintType)
	return protowire.AppendVarint(dst, seq)
}
