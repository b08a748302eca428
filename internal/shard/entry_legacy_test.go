package shard

import (
	"bytes"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// legacyPrepareWithID is PrepareWithID as it was before it sized its buffer
// once, hashed without hash/fnv and encoded created_at by hand. Stored
// records and their client hashes are compared across versions, so the two
// must agree exactly.
func legacyPrepareWithID(rec *rolloutv1.Record, id string, now time.Time) (Entry, error) {
	if rec.GetSeq() != 0 {
		rec = proto.CloneOf(rec)
		rec.Seq = 0
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return Entry{}, err
	}
	h := fnv.New64a()
	h.Write(data)
	e := Entry{ID: rec.GetId(), ClientHash: h.Sum64()}
	if e.ID == "" {
		e.ID = id
		if e.ID == "" {
			e.ID = uuid.Must(uuid.NewV7()).String()
		}
		data = protowire.AppendTag(data, fieldID, protowire.BytesType)
		data = protowire.AppendString(data, e.ID)
	}
	if rec.GetCreatedAt() == nil {
		ts, err := proto.Marshal(timestamppb.New(now))
		if err != nil {
			return Entry{}, err
		}
		data = protowire.AppendTag(data, fieldCreatedAt, protowire.BytesType)
		data = protowire.AppendBytes(data, ts)
	}
	e.Data = data
	return e, nil
}

// TestPrepareWithIDMatchesLegacy: for records with and without an id,
// created_at or seq, and times of every varint width (before 1970, the
// epoch, whole seconds, the last nanosecond), PrepareWithID stores the
// same bytes, id and client hash as before; and what it refuses, the old
// code refused.
func TestPrepareWithIDMatchesLegacy(t *testing.T) {
	big := record("")
	big.Content = strings.Repeat("x", 20_000)
	big.InputTokens = []int32{-1, 1 << 30, 0, 7}
	withTime := record("has-time")
	withTime.CreatedAt = timestamppb.New(time.Unix(5, 6))
	withSeq := record("")
	withSeq.Seq = 99
	unknown := record("")
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 5))
	recs := []*rolloutv1.Record{record("id-1"), record(""), big, withTime, withSeq, unknown, {}}
	times := []time.Time{
		time.Unix(1_800_000_000, 123_456_789), time.Unix(0, 0), time.Unix(0, 1), time.Unix(-1, 0),
		time.Unix(-62_135_596_800, 0), time.Unix(1_800_000_000, 0), time.Unix(253_402_300_799, 999_999_999),
	}
	for _, id := range []string{"given-id", strings.Repeat("i", 200), ""} {
		for ri, rec := range recs {
			for _, now := range times {
				got, err := PrepareWithID(rec, id, now)
				if err != nil {
					t.Fatal(err)
				}
				wantID := id
				if wantID == "" {
					wantID = got.ID // a fresh UUIDv7: give the old code the same one
				}
				want, err := legacyPrepareWithID(rec, wantID, now)
				if err != nil {
					t.Fatal(err)
				}
				if got.ID != want.ID || got.ClientHash != want.ClientHash || !bytes.Equal(got.Data, want.Data) {
					t.Fatalf("record %d, id %q, now %v: got id %q hash %x, %d bytes; legacy id %q hash %x, %d bytes (equal bytes: %v)",
						ri, id, now, got.ID, got.ClientHash, len(got.Data), want.ID, want.ClientHash, len(want.Data), bytes.Equal(got.Data, want.Data))
				}
			}
		}
	}
	bad := record("bad")
	bad.Content = "\xff"
	if _, err := PrepareWithID(bad, "", time.Now()); err == nil {
		t.Fatal("a record with invalid UTF-8 was prepared")
	}
	if _, err := legacyPrepareWithID(bad, "", time.Now()); err == nil {
		t.Fatal("the legacy code prepared a record with invalid UTF-8")
	}
}

// TestClientHashIsFNV1a64: the hash is hash/fnv's 64-bit FNV-1a, on
// inputs of every length up to a few words.
func TestClientHashIsFNV1a64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		h := fnv.New64a()
		h.Write(b)
		if got, want := clientHash(b), h.Sum64(); got != want {
			t.Fatalf("%d bytes: clientHash %x, hash/fnv %x", n, got, want)
		}
	}
}
