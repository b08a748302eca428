package consumer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/consumer/consumerpb"
)

func sampleRecord() record {
	return record{
		c: &Consumer{Key: Key{Prefix: "exp-1", Name: "trainer"}, Generation: 3,
			Positions: map[string]uint64{"exp-1/a": 7, "exp-1/b/c": 1 << 40, "exp-1": 0},
			CreatedAt: epoch, UpdatedAt: epoch.Add(time.Hour)},
		writeID: "w1", generationID: "g1",
	}
}

func mustEncode(t testing.TB, r record) []byte {
	b, err := encode(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCodecRoundTrip(t *testing.T) {
	for _, r := range []record{
		sampleRecord(),
		{c: &Consumer{Key: Key{Name: "x"}, Generation: 1, Positions: map[string]uint64{}}},
	} {
		b := mustEncode(t, r)
		got, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.c.Key != r.c.Key || got.c.Generation != r.c.Generation || !maps.Equal(got.c.Positions, r.c.Positions) ||
			!got.c.UpdatedAt.Equal(r.c.UpdatedAt) || got.writeID != r.writeID || got.generationID != r.generationID {
			t.Fatalf("round trip: %+v %+v, want %+v %+v", got, got.c, r, r.c)
		}
		if again := mustEncode(t, got); !bytes.Equal(again, b) {
			t.Fatal("encoding is not deterministic")
		}
	}
}

// reframe frames body as a version v consumer blob with a good checksum.
func reframe(v uint32, body []byte) []byte {
	out := append(magic[:0:0], magic[:]...)
	out = binary.LittleEndian.AppendUint32(out, v)
	out = append(out, body...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

func body(m *consumerpb.Consumer) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// corruptSeeds are stored bytes decode must refuse, each for a reason.
func corruptSeeds(t testing.TB) map[string][]byte {
	good := mustEncode(t, sampleRecord())
	flip := bytes.Clone(good)
	flip[10] ^= 1
	valid := func(edit func(m *consumerpb.Consumer)) []byte {
		m := &consumerpb.Consumer{Prefix: "p", Name: "x", Generation: 1, Positions: map[string]uint64{"p/a": 1}}
		edit(m)
		return reframe(FormatVersion, body(m))
	}
	return map[string][]byte{
		"empty":             nil,
		"short":             good[:overhead-1],
		"bad magic":         append([]byte("RLMF"), good[4:]...),
		"bad checksum":      flip,
		"truncated":         good[:len(good)-1],
		"future version":    reframe(FormatVersion+1, body(&consumerpb.Consumer{Prefix: "p", Name: "x", Generation: 1})),
		"bad body":          reframe(FormatVersion, []byte{0xff, 0xff, 0xff}),
		"generation 0":      valid(func(m *consumerpb.Consumer) { m.Generation = 0 }),
		"bad name":          valid(func(m *consumerpb.Consumer) { m.Name = "../x" }),
		"no name":           valid(func(m *consumerpb.Consumer) { m.Name = "" }),
		"bad prefix":        valid(func(m *consumerpb.Consumer) { m.Prefix = "P" }),
		"prefix with slash": valid(func(m *consumerpb.Consumer) { m.Prefix = "p/" }),
		"shard outside":     valid(func(m *consumerpb.Consumer) { m.Positions["q/a"] = 1 }),
		"shard not a name":  valid(func(m *consumerpb.Consumer) { m.Positions["p/_a"] = 1 }),
	}
}

func TestDecodeRefusesCorrupt(t *testing.T) {
	for name, b := range corruptSeeds(t) {
		if r, err := decode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode = %+v, %v; want ErrCorrupt", name, r, err)
		}
	}
}

// FuzzDecodeConsumer: decode never panics on stored bytes, and whatever it
// accepts keeps the rules (a valid key, generation >= 1, every shard under
// the prefix, the bound) and survives a round trip. Its seeds, a valid
// blob and one of each corruption, run with every `go test`.
func FuzzDecodeConsumer(f *testing.F) {
	f.Add(mustEncode(f, sampleRecord()))
	f.Add(mustEncode(f, record{c: &Consumer{Key: Key{Name: "x"}, Generation: 1}}))
	for _, b := range corruptSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if nk, err := r.c.Key.Normalize(); err != nil || nk != r.c.Key || r.c.Generation == 0 {
			t.Fatalf("accepted %+v", r.c)
		}
		if err := ValidatePositions("positions", r.c.Prefix, r.c.Positions); err != nil {
			t.Fatalf("accepted positions: %v", err)
		}
		again, err := decode(mustEncode(t, r))
		if err != nil || !maps.Equal(again.c.Positions, r.c.Positions) || again.c.Key != r.c.Key {
			t.Fatalf("round trip of an accepted blob: %+v, %v", again, err)
		}
	})
}
