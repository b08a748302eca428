package format

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// generationsField is Manifest.generations' field number.
const generationsField protowire.Number = 5

// ManifestEncoder writes the bytes EncodeManifest writes, keeping each
// generation's encoding from one manifest to the next: a writer's
// successive checkpoints list mostly the same generations, and encoding
// them again was most of a checkpoint's CPU. It keys them by pointer, so
// it relies on what the writer guarantees: a generation listed in a
// manifest is never changed afterwards. It is not safe for concurrent use.
type ManifestEncoder struct {
	gens map[*storagepb.Generation][]byte
}

// Encode serializes m exactly as EncodeManifest does. It keeps the
// encodings of m's generations only, for the next call. It sets m's
// generations aside while it works, so m must be the caller's own.
func (e *ManifestEncoder) Encode(m *storagepb.Manifest) ([]byte, error) {
	gens := m.GetGenerations()
	if len(m.ProtoReflect().GetUnknown()) > 0 || len(gens) == 0 {
		return EncodeManifest(m)
	}
	v, err := manifestVersion(m)
	if err != nil {
		return nil, err
	}
	// The Go protobuf runtime marshals fields in field-number order, a
	// repeated message as tag, length and message per element: the body
	// without the generations, split before the first field after them,
	// has them spliced in where a full marshal puts them.
	m.Generations = nil
	rest, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	m.Generations = gens
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	at, err := splitBefore(rest, generationsField)
	if err != nil {
		return nil, err
	}
	kept := make(map[*storagepb.Generation][]byte, len(gens))
	size := len(rest)
	for _, g := range gens {
		b, ok := kept[g]
		if !ok {
			if b, ok = e.gens[g]; !ok {
				if b, err = (proto.MarshalOptions{Deterministic: true}).Marshal(g); err != nil {
					return nil, fmt.Errorf("encode manifest: %w", err)
				}
			}
			kept[g] = b
		}
		size += protowire.SizeTag(generationsField) + protowire.SizeBytes(len(b))
	}
	e.gens = kept
	out := make([]byte, 0, manifestOverhead+size)
	out = append(out, manifestMagic[:]...)
	out = binary.LittleEndian.AppendUint32(out, v)
	out = append(out, rest[:at]...)
	for _, g := range gens {
		out = protowire.AppendTag(out, generationsField, protowire.BytesType)
		out = protowire.AppendBytes(out, kept[g])
	}
	out = append(out, rest[at:]...)
	return binary.LittleEndian.AppendUint32(out, Checksum(out)), nil
}

// splitBefore returns the offset of the first field in b numbered after
// num, or len(b).
func splitBefore(b []byte, num protowire.Number) (int, error) {
	at := 0
	for at < len(b) {
		n, typ, k := protowire.ConsumeTag(b[at:])
		if k < 0 {
			return 0, fmt.Errorf("encode manifest: %w", protowire.ParseError(k))
		}
		if n > num {
			return at, nil
		}
		l := protowire.ConsumeFieldValue(n, typ, b[at+k:])
		if l < 0 {
			return 0, fmt.Errorf("encode manifest: %w", protowire.ParseError(l))
		}
		at += k + l
	}
	return at, nil
}
