package consumer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/consumer/consumerpb"
)

// A consumer blob is: magic, format version (uint32 LE), the protobuf
// consumerpb.Consumer, then the CRC32C (uint32 LE) of everything before
// it, as the shard manifest is framed.
var magic = [4]byte{'R', 'L', 'C', 'N'}

// FormatVersion is the format of a consumer blob this build writes and
// reads.
const FormatVersion = 1

const overhead = 4 + 4 + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is one stored version of a consumer, with what identifies the
// write that stored it.
type record struct {
	c *Consumer
	// writeID is the id of the write that stored this version;
	// generationID that of the write that started its generation.
	writeID, generationID string
}

// encode serializes r.
func encode(r record) ([]byte, error) {
	m := &consumerpb.Consumer{
		Prefix:           r.c.Prefix,
		Name:             r.c.Name,
		Generation:       r.c.Generation,
		Positions:        r.c.Positions,
		CreatedUnixNanos: unixNanos(r.c.CreatedAt),
		UpdatedUnixNanos: unixNanos(r.c.UpdatedAt),
		WriteId:          r.writeID,
		GenerationId:     r.generationID,
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode consumer %s: %w", r.c.Key, err)
	}
	out := make([]byte, 0, overhead+len(body))
	out = append(out, magic[:]...)
	out = binary.LittleEndian.AppendUint32(out, FormatVersion)
	out = append(out, body...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli)), nil
}

// decode parses and verifies a consumer blob. Its bytes come from storage:
// anything wrong is ErrCorrupt, never a panic, and never a consumer that
// breaks the rules the writers keep (a shard outside the prefix, too many
// positions, generation 0).
func decode(b []byte) (record, error) {
	if len(b) < overhead {
		return record{}, fmt.Errorf("%w: %d bytes is shorter than the %d-byte frame", ErrCorrupt, len(b), overhead)
	}
	if [4]byte(b[:4]) != magic {
		return record{}, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:4])
	}
	if v := binary.LittleEndian.Uint32(b[4:8]); v != FormatVersion {
		return record{}, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, v, FormatVersion)
	}
	n := len(b) - 4
	if want, got := binary.LittleEndian.Uint32(b[n:]), crc32.Checksum(b[:n], castagnoli); want != got {
		return record{}, fmt.Errorf("%w: checksum %08x, computed %08x", ErrCorrupt, want, got)
	}
	m := &consumerpb.Consumer{}
	if err := proto.Unmarshal(b[8:n], m); err != nil {
		return record{}, fmt.Errorf("%w: body: %v", ErrCorrupt, err)
	}
	k, err := Key{Prefix: m.GetPrefix(), Name: m.GetName()}.Normalize()
	if err != nil || k.Prefix != m.GetPrefix() {
		return record{}, fmt.Errorf("%w: key %q:%q: %v", ErrCorrupt, m.GetPrefix(), m.GetName(), err)
	}
	if m.GetGeneration() == 0 {
		return record{}, fmt.Errorf("%w: consumer %s: generation 0", ErrCorrupt, k)
	}
	if err := ValidatePositions("positions", k.Prefix, m.GetPositions()); err != nil {
		return record{}, fmt.Errorf("%w: consumer %s: %v", ErrCorrupt, k, err)
	}
	positions := m.GetPositions()
	if positions == nil {
		positions = map[string]uint64{}
	}
	return record{
		c: &Consumer{
			Key:        k,
			Generation: m.GetGeneration(),
			Positions:  positions,
			CreatedAt:  fromUnixNanos(m.GetCreatedUnixNanos()),
			UpdatedAt:  fromUnixNanos(m.GetUpdatedUnixNanos()),
		},
		writeID:      m.GetWriteId(),
		generationID: m.GetGenerationId(),
	}, nil
}

// unixNanos is t in Unix nanoseconds, 0 for the zero time (which has
// none).
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// fromUnixNanos is the inverse of unixNanos, in UTC.
func fromUnixNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
