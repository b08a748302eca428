package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

func sampleManifest() *storagepb.Manifest {
	return &storagepb.Manifest{
		Epoch: 3, Owner: "w", NextGeneration: 5, NextSeq: 11,
		Generations: []*storagepb.Generation{
			{Number: 2, Epoch: 1, FirstSeq: 1, LastSeq: 4, Records: 4, Bytes: 100, FooterOffset: 50, FooterLength: 30},
			{Number: 4, Epoch: 3, FirstSeq: 5, LastSeq: 10, Records: 6, Bytes: 200, FooterOffset: 120, FooterLength: 60},
		},
		Epochs:         []*storagepb.EpochRecord{{Epoch: 1, LastGeneration: 2}, {Epoch: 3, LastGeneration: 4}},
		RetiredBatches: []*storagepb.RetiredBatch{{RetiredUnixNanos: 1, Epochs: []uint64{1}, Numbers: []uint64{1}}},
		RetiredRuns:    []*storagepb.RetiredRuns{{RetiredUnixNanos: 2, Epochs: []uint64{3}, Firsts: []uint64{3}, Counts: []uint64{1}}},
	}
}

func sampleGeneration(t testing.TB) ([]byte, uint64) {
	b := NewGenerationBuilder("a/b", 2, 7, 64)
	for i := range 5 {
		b.Add(fmt.Sprintf("id-%d", i), uint64(10+i), []byte(fmt.Sprintf("record %d", i)), uint64(i))
	}
	l, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return l.Data, l.FooterOffset
}

func TestManifestRoundTrip(t *testing.T) {
	m := sampleManifest()
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, m) {
		t.Fatalf("round trip: got %v, want %v", got, m)
	}
}

func TestManifestRejectsCorruption(t *testing.T) {
	good, err := EncodeManifest(sampleManifest())
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte { b := append([]byte(nil), good...); b[i] ^= 0x40; return b }
	overlap := sampleManifest()
	overlap.Generations[1].FirstSeq = 3
	overlapBytes, _ := EncodeManifest(overlap)
	lie := func(f func(m *storagepb.Manifest)) []byte {
		m := sampleManifest()
		f(m)
		b, _ := EncodeManifest(m)
		return b
	}
	for name, b := range map[string][]byte{
		"retired epochs unpaired": lie(func(m *storagepb.Manifest) { m.RetiredBatches[0].Epochs = nil }),
		"retired runs unpaired":   lie(func(m *storagepb.Manifest) { m.RetiredRuns[0].Counts = nil }),
		"retired run of 0":        lie(func(m *storagepb.Manifest) { m.RetiredRuns[0].Counts[0] = 0 }),
		"retired run past next":   lie(func(m *storagepb.Manifest) { m.RetiredRuns[0].Counts[0] = 1 << 62 }),
		"retired run at next":     lie(func(m *storagepb.Manifest) { m.RetiredRuns[0].Firsts[0] = 5 }),
		"retired run of epoch 0":  lie(func(m *storagepb.Manifest) { m.RetiredRuns[0].Epochs[0] = 0 }),
		"empty":                   nil,
		"short":                   good[:5],
		"bad magic":               flip(0),
		"bad version":             flip(4),
		"flipped body":            flip(10),
		"flipped crc":             flip(len(good) - 1),
		"truncated":               good[:len(good)-3],
		"overlap":                 overlapBytes,
	} {
		if _, err := DecodeManifest(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeManifest = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestGenerationRoundTripAndRangedRecord(t *testing.T) {
	data, off := sampleGeneration(t)
	f, err := DecodeGeneration(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.GetShard() != "a/b" || f.GetEpoch() != 2 || f.GetGeneration() != 7 || len(f.GetEntries()) != 5 {
		t.Fatalf("footer = %v", f)
	}
	tail, err := DecodeFooter(data[off:], off)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(tail, f) {
		t.Fatal("footer from the tail differs from the whole-blob decode")
	}
	e := f.GetEntries()[3]
	rec, err := Record(data[e.GetOffset():e.GetOffset()+uint64(e.GetLength())], e)
	if err != nil || string(rec) != "record 3" || e.GetSeq() != 13 {
		t.Fatalf("record 3 = %q, %v (seq %d)", rec, err, e.GetSeq())
	}
	if _, err := Record([]byte("recorD 3"), e); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a flipped record byte: %v, want ErrCorrupt", err)
	}
}

func TestGenerationFilter(t *testing.T) {
	b := NewGenerationBuilder("s", 1, 1, 0)
	for i := range 1000 {
		b.Add(fmt.Sprintf("id-%d", i), uint64(i+1), []byte("r"), 0)
	}
	l, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	f, err := DecodeFilter(l.Data[l.FilterOffset():l.FooterOffset], l.FilterCRC)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if !f.TestString(fmt.Sprintf("id-%d", i)) {
			t.Fatalf("filter misses id-%d", i)
		}
	}
	var fp int
	for i := range 10000 {
		if f.TestString(fmt.Sprintf("other-%d", i)) {
			fp++
		}
	}
	if fp > 300 { // 1% target; 3% would mean the filter is mis-sized
		t.Fatalf("%d false positives in 10000", fp)
	}
	if _, err := DecodeFilter(l.Data[l.FilterOffset():l.FooterOffset], l.FilterCRC^1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong filter CRC: %v, want ErrCorrupt", err)
	}
}

func FuzzDecodeFilter(f *testing.F) {
	b := NewGenerationBuilder("s", 1, 1, 0)
	b.Add("a", 1, []byte("r"), 0)
	l, err := b.Finish()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(l.Data[l.FilterOffset():l.FooterOffset])
	f.Fuzz(func(t *testing.T, b []byte) {
		// The CRC is taken over the fuzzed bytes so the size checks behind
		// it are what gets exercised.
		flt, err := DecodeFilter(b, Checksum(b))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not classified as corrupt: %v", err)
			}
			return
		}
		flt.TestString("x")
	})
}

func TestGenerationRejectsCorruption(t *testing.T) {
	good, off := sampleGeneration(t)
	for i := range good {
		b := append([]byte(nil), good...)
		b[i] ^= 0x01
		if _, err := DecodeGeneration(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipping byte %d of %d: DecodeGeneration = %v, want ErrCorrupt", i, len(good), err)
		}
	}
	if _, err := DecodeFooter(good[off+1:], off); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("footer read from the wrong offset: %v, want ErrCorrupt", err)
	}
}

func TestGenerationNames(t *testing.T) {
	name := GenerationName("x/y", 3, 0x1f)
	if want := "shards/x/y/_g/0000000000000003-000000000000001f"; name != want {
		t.Fatalf("GenerationName = %q, want %q", name, want)
	}
	e, g, ok := ParseGenerationName("x/y", name)
	if !ok || e != 3 || g != 0x1f {
		t.Fatalf("ParseGenerationName = %d, %d, %v", e, g, ok)
	}
	for _, bad := range []string{"shards/x/y/_g/3-1f", "shards/x/z/_g/0000000000000003-000000000000001f", "shards/x/y/_g/0000000000000003-000000000000001f/_manifest", ManifestName("x/y")} {
		if _, _, ok := ParseGenerationName("x/y", bad); ok {
			t.Errorf("ParseGenerationName accepted %q", bad)
		}
	}
}

// fuzzSeeds are more manifests FuzzDecodeManifest starts from.
var fuzzSeeds []func() *storagepb.Manifest

func FuzzDecodeManifest(f *testing.F) {
	good, err := EncodeManifest(sampleManifest())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("RLMF\x01\x00\x00\x00"))
	for _, seed := range fuzzSeeds {
		b, err := EncodeManifest(seed())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not classified as corrupt: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode to a manifest that decodes equal.
		again, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeManifest(again)
		if err != nil || !proto.Equal(m, m2) {
			t.Fatalf("re-encoded manifest does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeGeneration(f *testing.F) {
	good, _ := sampleGeneration(f)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		ft, err := DecodeGeneration(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not classified as corrupt: %v", err)
			}
			return
		}
		for _, e := range ft.GetEntries() {
			end := e.GetOffset() + uint64(e.GetLength())
			if end > uint64(len(b)) {
				t.Fatalf("entry %q points past the blob", e.GetId())
			}
			if _, err := Record(b[e.GetOffset():end], e); err != nil {
				t.Fatalf("accepted generation has an unreadable record: %v", err)
			}
		}
	})
}

func sampleLogBatch(t testing.TB) []byte {
	b := NewLogBatchBuilder(LogEntry{Shard: "a/b", Epoch: 4, Position: 9, Writer: "w", PutID: "w-1"}, 64)
	for i := range 3 {
		b.Add(fmt.Sprintf("id-%d", i), uint64(20+i), []byte(fmt.Sprintf("record %d", i)), uint64(i))
	}
	l, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return l.Data
}

func TestLogEntries(t *testing.T) {
	data := sampleLogBatch(t)
	f, err := DecodeLogEntry("a/b", 9, data)
	if err != nil {
		t.Fatal(err)
	}
	if f.GetFence() || f.GetEpoch() != 4 || f.GetPutId() != "w-1" || f.GetNextSeq() != 23 || len(f.GetEntries()) != 3 {
		t.Fatalf("batch footer = %v", f)
	}
	if _, err := DecodeLogEntry("a/b", 10, data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("batch read at the wrong position: %v, want ErrCorrupt", err)
	}
	if _, err := DecodeLogEntry("a/c", 9, data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("batch read in the wrong shard: %v, want ErrCorrupt", err)
	}
	l, err := EncodeFence(LogEntry{Shard: "a/b", Epoch: 5, Position: 10, Writer: "v", PutID: "v-1", NextSeq: 23})
	if err != nil {
		t.Fatal(err)
	}
	f, err = DecodeLogEntry("a/b", 10, l.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !f.GetFence() || f.GetEpoch() != 5 || f.GetNextSeq() != 23 || len(f.GetEntries()) != 0 {
		t.Fatalf("fence footer = %v", f)
	}
	gen, _ := sampleGeneration(t)
	if _, err := DecodeLogEntry("a/b", 7, gen); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a generation read as a log entry: %v, want ErrCorrupt", err)
	}
}

func TestLogNames(t *testing.T) {
	name := LogName("x/y", 0x1f)
	if want := "shards/x/y/_l/000000000000001f"; name != want {
		t.Fatalf("LogName = %q, want %q", name, want)
	}
	if p, ok := ParseLogName("x/y", name); !ok || p != 0x1f {
		t.Fatalf("ParseLogName = %d, %v", p, ok)
	}
	for _, bad := range []string{"shards/x/y/_l/1f", "shards/x/y/_l/0000000000000000", GenerationName("x/y", 1, 0x1f), ManifestName("x/y")} {
		if _, ok := ParseLogName("x/y", bad); ok {
			t.Errorf("ParseLogName accepted %q", bad)
		}
	}
}

func TestManifestVersions(t *testing.T) {
	m := sampleManifest()
	v1, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if v1[4] != ManifestVersion {
		t.Fatalf("a protocol v1 manifest encodes as version %d", v1[4])
	}
	m.Protocol, m.LogCheckpoint = ProtocolV2, 12
	m.Generations = append(m.Generations, &storagepb.Generation{Position: 12, Epoch: 3, FirstSeq: 11, LastSeq: 11, Records: 1, Bytes: 100, FooterOffset: 50, FooterLength: 30})
	m.NextSeq = 12
	m.RetiredRuns = append(m.RetiredRuns, &storagepb.RetiredRuns{RetiredUnixNanos: 3, Epochs: []uint64{0}, Firsts: []uint64{1}, Counts: []uint64{11}})
	v2, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if v2[4] != ManifestVersionV2 {
		t.Fatalf("a protocol v2 manifest encodes as version %d", v2[4])
	}
	got, err := DecodeManifest(v2)
	if err != nil || !proto.Equal(got, m) {
		t.Fatalf("v2 round trip: %v", err)
	}
	lie := func(f func(m *storagepb.Manifest)) *storagepb.Manifest {
		c := proto.CloneOf(m)
		f(c)
		return c
	}
	for name, bad := range map[string]*storagepb.Manifest{
		"position past checkpoint":  lie(func(m *storagepb.Manifest) { m.LogCheckpoint = 11 }),
		"numbered log batch":        lie(func(m *storagepb.Manifest) { m.Generations[2].Number = 1 }),
		"retired past checkpoint":   lie(func(m *storagepb.Manifest) { m.RetiredRuns[1].Counts[0] = 13 }),
		"checkpoint in v1 manifest": lie(func(m *storagepb.Manifest) { m.Protocol, m.Generations = 0, m.Generations[:2] }),
		"retired position 0":        lie(func(m *storagepb.Manifest) { m.RetiredRuns[1].Firsts[0] = 0 }),
	} {
		b, err := EncodeManifest(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeManifest(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeManifest = %v, want ErrCorrupt", name, err)
		}
	}
	// The header and the body must agree on the protocol.
	swapped := append([]byte(nil), v1...)
	swapped[4] = ManifestVersionV2
	n := len(swapped) - 4
	swapped = binary.LittleEndian.AppendUint32(swapped[:n], Checksum(swapped[:n]))
	if _, err := DecodeManifest(swapped); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a v1 body under a version 2 header: %v, want ErrCorrupt", err)
	}
}

func FuzzDecodeLogEntry(f *testing.F) {
	f.Add(sampleLogBatch(f), uint64(9))
	l, err := EncodeFence(LogEntry{Shard: "a/b", Epoch: 5, Position: 10, Writer: "v", PutID: "v-1", NextSeq: 23})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(l.Data, uint64(10))
	f.Fuzz(func(t *testing.T, b []byte, position uint64) {
		ft, err := DecodeLogEntry("a/b", position, b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not classified as corrupt: %v", err)
			}
			return
		}
		if ft.GetPosition() != position || ft.GetFence() != (len(ft.GetEntries()) == 0) {
			t.Fatalf("accepted a log entry that does not describe itself: %v", ft)
		}
		for _, e := range ft.GetEntries() {
			if _, err := Record(b[e.GetOffset():e.GetOffset()+uint64(e.GetLength())], e); err != nil {
				t.Fatalf("accepted log entry has an unreadable record: %v", err)
			}
		}
	})
}

// The names are built by hand: they must be exactly what %016x wrote,
// since stored blobs carry them.
func TestNamesAreFixedWidthHex(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xf, 0x10, 0xabcdef, 1<<63 + 5, ^uint64(0)} {
		if got, want := LogName("a/b", v), fmt.Sprintf("shards/a/b/_l/%016x", v); got != want {
			t.Errorf("LogName(%#x) = %q, want %q", v, got, want)
		}
		if got, want := GenerationName("a/b", v, ^v), fmt.Sprintf("shards/a/b/_g/%016x-%016x", v, ^v); got != want {
			t.Errorf("GenerationName(%#x) = %q, want %q", v, got, want)
		}
	}
}
