package shard

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// DeriveID is stable: these ids are stored, and a resend after an upgrade
// must derive the same ones. The golden values were checked against an
// independent implementation (Python's hashlib and uuid).
func TestDeriveIDIsStable(t *testing.T) {
	const req = "7d417461-261f-4244-9e13-d7c71483cd59"
	for _, tt := range []struct {
		index int
		want  string
	}{
		{0, "32a3bd96-0fb4-82a1-9ebc-1c9b81e271fc"},
		{1, "d0b7c717-8cd1-8b22-9c1e-043039caaf20"},
	} {
		if got := DeriveID("exp-42/actor-7", req, tt.index); got != tt.want {
			t.Errorf("DeriveID(index %d) = %s, want %s", tt.index, got, tt.want)
		}
	}
}

// Every part of the triple counts, parts cannot run into each other, and
// the result is a valid record id and an RFC 9562 UUIDv8.
func TestDeriveIDDistinguishesItsInputs(t *testing.T) {
	triples := []struct {
		shard, req string
		index      int
	}{
		{"s", "r", 0}, {"s", "r", 1}, {"s", "r", 128}, {"t", "r", 0}, {"s", "q", 0},
		// Concatenations that agree unless the parts are delimited.
		{"ab", "c", 0}, {"a", "bc", 0}, {"a/b", "1", 2}, {"a/b1", "", 2},
	}
	seen := map[string]int{}
	for i, tr := range triples {
		id := DeriveID(tr.shard, tr.req, tr.index)
		if j, dup := seen[id]; dup {
			t.Errorf("%v and %v derive the same id %s", tr, triples[j], id)
		}
		seen[id] = i
		if err := validate.RecordID(id); err != nil {
			t.Errorf("derived id %q is not a valid record id: %v", id, err)
		}
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 8 || u.Variant() != uuid.RFC4122 {
			t.Errorf("derived id %q: version %d variant %v (%v), want an RFC 9562 UUIDv8", id, u.Version(), u.Variant(), err)
		}
		if again := DeriveID(tr.shard, tr.req, tr.index); again != id {
			t.Errorf("%v derived %s, then %s", tr, id, again)
		}
	}
}

// PrepareWithID gives an id-less record the id passed, leaves a caller's id
// alone, and hashes the client's content without the filled id, like any
// server-filled id.
func TestPrepareWithID(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	rec := &rolloutv1.Record{Content: "grade", Reward: new(float32(1))}
	const id = "32a3bd96-0fb4-82a1-9ebc-1c9b81e271fc"
	e, err := PrepareWithID(rec, id, now)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID != id || rec.GetId() != "" {
		t.Fatalf("prepared id %q (record's id now %q), want %q and the record unchanged", e.ID, rec.GetId(), id)
	}
	plain, err := Prepare(rec, now)
	if err != nil {
		t.Fatal(err)
	}
	if plain.ClientHash != e.ClientHash || plain.ID == id {
		t.Errorf("Prepare: id %q hash %x; PrepareWithID: hash %x; want a fresh id and the same hash", plain.ID, plain.ClientHash, e.ClientHash)
	}
	stored := &rolloutv1.Record{}
	if err := proto.Unmarshal(e.Data, stored); err != nil || stored.GetId() != id || stored.GetContent() != "grade" || stored.GetCreatedAt() == nil {
		t.Errorf("stored encoding %v (%v), want the record with id %q and created_at", stored, err, id)
	}
	own, err := PrepareWithID(&rolloutv1.Record{Id: "mine", Content: "x"}, id, now)
	if err != nil || own.ID != "mine" {
		t.Errorf("a caller's id became %q (%v), want it unchanged", own.ID, err)
	}
}
