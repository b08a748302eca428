package format

import (
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

func tombstoneManifest() *storagepb.Manifest {
	return &storagepb.Manifest{
		Epoch: 7, NextGeneration: 12, NextSeq: 500, Incarnation: 1, DeletedThroughEpoch: 7,
		Tombstone: &storagepb.Tombstone{DeletedUnixNanos: 1, LastSeq: 499, Records: 420},
		Epochs:    []*storagepb.EpochRecord{{Epoch: 6, LastGeneration: 11}, {Epoch: 7}},
	}
}

// A tombstone is written at TombstoneVersion, the next incarnation at
// ManifestVersion again, and a version that does not match the tombstone
// state is refused: a tombstone relabelled as version 1 would be appended
// to by a build that predates deletion.
func TestTombstoneVersion(t *testing.T) {
	ts := tombstoneManifest()
	b, err := EncodeManifest(ts)
	if err != nil {
		t.Fatal(err)
	}
	if v := Version(b); v != TombstoneVersion {
		t.Fatalf("tombstone written at version %d, want %d", v, TombstoneVersion)
	}
	got, err := DecodeManifest(b)
	if err != nil || !proto.Equal(got, ts) {
		t.Fatalf("tombstone round trip: %v, %v", got, err)
	}
	live := proto.CloneOf(ts)
	live.Tombstone = nil
	lb, err := EncodeManifest(live)
	if err != nil {
		t.Fatal(err)
	}
	if v := Version(lb); v != ManifestVersion {
		t.Fatalf("next incarnation written at version %d, want %d", v, ManifestVersion)
	}
	for _, c := range []struct {
		name string
		b    []byte
	}{{"tombstone as v1", relabel(b, ManifestVersion)}, {"live as v3", relabel(lb, TombstoneVersion)}, {"v2", relabel(lb, 2)}} {
		if _, err := DecodeManifest(c.b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeManifest = %v, want ErrCorrupt", c.name, err)
		}
	}
	withGen := proto.CloneOf(ts)
	withGen.Generations = sampleManifest().GetGenerations()[:1]
	withGen.NextGeneration, withGen.NextSeq = 100, 1000
	wb, err := EncodeManifest(withGen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeManifest(wb); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a tombstone listing generations decoded: %v", err)
	}
}

// relabel rewrites b's version and checksum.
func relabel(b []byte, v uint32) []byte {
	out := append([]byte(nil), b[:len(b)-4]...)
	binary.LittleEndian.PutUint32(out[4:8], v)
	return binary.LittleEndian.AppendUint32(out, Checksum(out))
}

func init() { fuzzSeeds = append(fuzzSeeds, tombstoneManifest) }
