package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// ManifestVersion is the manifest format of a live protocol v1 shard,
// which this build writes for a shard no protocol v2 writer has claimed.
const ManifestVersion = 1

// ManifestVersionV2 is the manifest format of a live shard claimed under
// protocol v2 (commit by create): the manifest is a checkpoint of the
// shard's log. Builds before protocol v2 reject it as corrupt, which is why
// a shard never goes back to version 1 (see docs/operations.md).
const ManifestVersionV2 = 2

// TombstoneVersion is the format of a deleted shard's manifest, one that
// holds a Tombstone. Builds that predate deletion read only version 1 and
// refuse it as corrupt, rather than append to a deleted shard as if it
// were live. The next incarnation is written at the live version again
// (the tombstone keeps the protocol, so a v2 shard stays v2).
const TombstoneVersion = 3

// ProtocolV2 is Manifest.protocol of a protocol v2 manifest.
const ProtocolV2 = 2

// manifestVersion is the format version m is written with.
func manifestVersion(m *storagepb.Manifest) (uint32, error) {
	switch m.GetProtocol() {
	case 0, ProtocolV2:
	default:
		return 0, fmt.Errorf("encode manifest: unknown protocol %d", m.GetProtocol())
	}
	switch {
	case m.GetTombstone() != nil:
		return TombstoneVersion, nil
	case m.GetProtocol() == ProtocolV2:
		return ManifestVersionV2, nil
	}
	return ManifestVersion, nil
}

// Version returns the format version of an encoded manifest, or 0 when b
// is too short to hold one. It does not verify b.
func Version(b []byte) uint32 {
	if len(b) < manifestOverhead {
		return 0
	}
	return binary.LittleEndian.Uint32(b[4:8])
}

// A manifest blob is: magic, version (uint32 LE), the protobuf Manifest, then
// the CRC32C (uint32 LE) of everything before it.
var manifestMagic = [4]byte{'R', 'L', 'M', 'F'}

const manifestOverhead = 4 + 4 + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C used by every stored format.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// EncodeManifest serializes m.
func EncodeManifest(m *storagepb.Manifest) ([]byte, error) {
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	v, err := manifestVersion(m)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, manifestOverhead+len(body))
	out = append(out, manifestMagic[:]...)
	out = binary.LittleEndian.AppendUint32(out, v)
	out = append(out, body...)
	return binary.LittleEndian.AppendUint32(out, Checksum(out)), nil
}

// DecodeManifest parses and verifies a manifest blob.
func DecodeManifest(b []byte) (*storagepb.Manifest, error) {
	if len(b) < manifestOverhead {
		return nil, fmt.Errorf("%w: manifest of %d bytes is shorter than its %d-byte frame", ErrCorrupt, len(b), manifestOverhead)
	}
	if [4]byte(b[:4]) != manifestMagic {
		return nil, fmt.Errorf("%w: manifest has bad magic %q", ErrCorrupt, b[:4])
	}
	v := binary.LittleEndian.Uint32(b[4:8])
	if v != ManifestVersion && v != ManifestVersionV2 && v != TombstoneVersion {
		return nil, fmt.Errorf("%w: manifest format version %d, this build reads %d, %d and %d", ErrCorrupt, v, ManifestVersion, ManifestVersionV2, TombstoneVersion)
	}
	n := len(b) - 4
	if want, got := binary.LittleEndian.Uint32(b[n:]), Checksum(b[:n]); want != got {
		return nil, fmt.Errorf("%w: manifest checksum %08x, computed %08x", ErrCorrupt, want, got)
	}
	m := &storagepb.Manifest{}
	if err := proto.Unmarshal(b[8:n], m); err != nil {
		return nil, fmt.Errorf("%w: manifest body: %v", ErrCorrupt, err)
	}
	if want, err := manifestVersion(m); err != nil || want != v {
		return nil, fmt.Errorf("%w: manifest of format version %d says protocol %d, tombstone %t", ErrCorrupt, v, m.GetProtocol(), m.GetTombstone() != nil)
	}
	if err := checkManifest(m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	return m, nil
}

// checkManifest verifies the invariants every reader relies on, so that a
// manifest that decodes but lies is still caught.
func checkManifest(m *storagepb.Manifest) error {
	if m.GetEpoch() == 0 {
		return fmt.Errorf("epoch 0")
	}
	if m.GetNextSeq() == 0 {
		return fmt.Errorf("next_seq 0")
	}
	ckpt := m.GetLogCheckpoint()
	if m.GetProtocol() == 0 && ckpt != 0 {
		return fmt.Errorf("log checkpoint %d in a protocol v1 manifest", ckpt)
	}
	if m.GetTombstone() != nil && len(m.GetGenerations()) > 0 {
		return fmt.Errorf("a tombstone lists %d generations", len(m.GetGenerations()))
	}
	var prevLast uint64
	for i, g := range m.GetGenerations() {
		if p := g.GetPosition(); p != 0 {
			// A log batch: named by its position, which the checkpoint
			// must cover, and numbered 0.
			if g.GetNumber() != 0 || p > ckpt {
				return fmt.Errorf("generation at log position %d (number %d): not covered by checkpoint %d", p, g.GetNumber(), ckpt)
			}
		} else if g.GetNumber() >= m.GetNextGeneration() {
			return fmt.Errorf("generation %d: not below next_generation %d", g.GetNumber(), m.GetNextGeneration())
		}
		switch {
		case g.GetFirstSeq() == 0 || g.GetLastSeq() < g.GetFirstSeq():
			return fmt.Errorf("generation %d: bad sequence range %d..%d", g.GetNumber(), g.GetFirstSeq(), g.GetLastSeq())
		case i > 0 && g.GetFirstSeq() <= prevLast:
			return fmt.Errorf("generation %d: sequence range %d..%d overlaps or precedes %d", g.GetNumber(), g.GetFirstSeq(), g.GetLastSeq(), prevLast)
		case g.GetLastSeq() >= m.GetNextSeq():
			return fmt.Errorf("generation %d: last seq %d not below next_seq %d", g.GetNumber(), g.GetLastSeq(), m.GetNextSeq())
		case g.GetEpoch() == 0 || g.GetEpoch() > m.GetEpoch():
			return fmt.Errorf("generation %d: epoch %d outside 1..%d", g.GetNumber(), g.GetEpoch(), m.GetEpoch())
		case uint64(g.GetFooterOffset())+uint64(g.GetFooterLength()) > g.GetBytes():
			return fmt.Errorf("generation %d: footer %d+%d past size %d", g.GetNumber(), g.GetFooterOffset(), g.GetFooterLength(), g.GetBytes())
		case uint64(g.GetFilterLength()) > g.GetFooterOffset():
			return fmt.Errorf("generation %d: filter of %d bytes before footer at %d", g.GetNumber(), g.GetFilterLength(), g.GetFooterOffset())
		case g.GetLastSeq()-g.GetFirstSeq()+1 != uint64(g.GetRecords()):
			return fmt.Errorf("generation %d: %d records for sequence range %d..%d", g.GetNumber(), g.GetRecords(), g.GetFirstSeq(), g.GetLastSeq())
		}
		prevLast = g.GetLastSeq()
	}
	for i, b := range m.GetRetiredBatches() {
		if len(b.GetEpochs()) != len(b.GetNumbers()) {
			return fmt.Errorf("retired batch %d: %d epochs for %d numbers", i, len(b.GetEpochs()), len(b.GetNumbers()))
		}
	}
	for i, b := range m.GetRetiredRuns() {
		n := len(b.GetFirsts())
		if len(b.GetEpochs()) != n || len(b.GetCounts()) != n {
			return fmt.Errorf("retired runs %d: %d epochs, %d firsts and %d counts do not pair up", i, len(b.GetEpochs()), n, len(b.GetCounts()))
		}
		for k, first := range b.GetFirsts() {
			// Generations are numbered below next_generation, so a run past
			// it is a lie that would have GC count towards 2^64.
			count, epoch := b.GetCounts()[k], b.GetEpochs()[k]
			if epoch == 0 {
				// Log positions (protocol v2), retired by a merge: the
				// checkpoint covers them.
				if count == 0 || first == 0 || first > ckpt || count > ckpt-first+1 {
					return fmt.Errorf("retired runs %d: %d log positions from %d, not within checkpoint %d", i, count, first, ckpt)
				}
				continue
			}
			if count == 0 || first >= m.GetNextGeneration() || count > m.GetNextGeneration()-first {
				return fmt.Errorf("retired runs %d: %d generations from %d, not within next_generation %d", i, count, first, m.GetNextGeneration())
			}
			if epoch == 0 || epoch > m.GetEpoch() {
				return fmt.Errorf("retired runs %d: epoch %d outside 1..%d", i, epoch, m.GetEpoch())
			}
		}
	}
	return nil
}

// VersionOf is the format version m is written with: TombstoneVersion for
// a tombstone, ManifestVersion otherwise.
func VersionOf(m *storagepb.Manifest) uint32 { v, _ := manifestVersion(m); return v }
