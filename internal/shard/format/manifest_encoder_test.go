package format

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// randomGen is a generation with every field set, some to values whose
// varints run long.
func randomGen(r *rand.Rand) *storagepb.Generation {
	return &storagepb.Generation{
		Number: r.Uint64N(1 << 40), Epoch: r.Uint64N(9) + 1, FirstSeq: r.Uint64(), LastSeq: r.Uint64(),
		Records: r.Uint32(), Bytes: r.Uint64N(1 << 30), FooterOffset: r.Uint64N(1 << 30), FooterLength: r.Uint32N(1 << 20),
		CreatedUnixNanos: r.Int64(), Level: r.Uint32N(4), FilterLength: r.Uint32N(1 << 16), FilterCrc32C: r.Uint32(), Position: r.Uint64N(1 << 20),
	}
}

// randomManifest sets every field of a manifest, the generations to gens.
func randomManifest(r *rand.Rand, gens []*storagepb.Generation) *storagepb.Manifest {
	m := &storagepb.Manifest{
		Epoch: r.Uint64N(100) + 1, Owner: "owner", NextGeneration: r.Uint64(), NextSeq: r.Uint64(),
		Generations:    gens,
		RetiredBatches: []*storagepb.RetiredBatch{{RetiredUnixNanos: r.Int64(), Epochs: []uint64{1, 2}, Numbers: []uint64{3, r.Uint64()}}},
		RetiredRuns:    []*storagepb.RetiredRuns{{RetiredUnixNanos: r.Int64(), Epochs: []uint64{1}, Firsts: []uint64{r.Uint64()}, Counts: []uint64{7}}},
		Epochs:         []*storagepb.EpochRecord{{Epoch: 1, LastGeneration: r.Uint64()}},
		CommitId:       "commit", UpdatedUnixNanos: r.Int64(), RecordCount: r.Uint64(), LogCheckpoint: r.Uint64(),
		Protocol: ProtocolV2, Incarnation: r.Uint64(), CreatedUnixNanos: r.Int64(), LastCommitUnixNanos: r.Int64(),
		DeletedThroughEpoch: r.Uint64(),
	}
	if r.IntN(4) == 0 {
		m.Protocol = 0
	}
	if r.IntN(3) == 0 {
		m.Tombstone = &storagepb.Tombstone{DeletedUnixNanos: r.Int64(), LastSeq: r.Uint64(), Records: r.Uint64()}
	}
	return m
}

// TestManifestEncoderMatchesEncodeManifest: the encoder's bytes are
// EncodeManifest's, byte for byte, over a sequence of manifests that
// share, drop, reorder and add generations, as a writer's checkpoints do,
// and with unknown fields.
func TestManifestEncoderMatchesEncodeManifest(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var e ManifestEncoder
	var gens []*storagepb.Generation
	for i := range 300 {
		switch {
		case len(gens) > 4 && r.IntN(5) == 0: // a merge: a run replaced by one output
			at := r.IntN(len(gens) - 3)
			gens = append(append(append([]*storagepb.Generation(nil), gens[:at]...), randomGen(r)), gens[at+3:]...)
		default:
			for range r.IntN(4) {
				gens = append(gens, randomGen(r))
			}
		}
		if r.IntN(7) == 0 {
			gens = append(gens, gens[0]) // the same generation twice
		}
		m := randomManifest(r, gens)
		if i%50 == 49 {
			m.ProtoReflect().SetUnknown([]byte{0xf8, 0x7f, 0x01}) // field 2047, varint 1
		}
		want, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("manifest %d (%d generations): encoder wrote %d bytes, EncodeManifest %d, and they differ", i, len(gens), len(got), len(want))
		}
		if len(m.GetGenerations()) != len(gens) {
			t.Fatalf("manifest %d: Encode left %d generations of %d", i, len(m.GetGenerations()), len(gens))
		}
	}
	// Every field of the manifest is set above but the tombstone, which is
	// set in some: a field added to the manifest and left unset here
	// would go untested.
	m := randomManifest(r, gens)
	m.Tombstone = &storagepb.Tombstone{}
	fields := m.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		if fd := fields.Get(i); !m.ProtoReflect().Has(fd) {
			t.Errorf("randomManifest leaves %s unset", fd.Name())
		}
	}
}
