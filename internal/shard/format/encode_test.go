package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/bits-and-blooms/bloom/v3"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// legacyFinish is Finish as it was before it encoded the filter and footer
// in place: the library's MarshalBinary and a separate footer buffer. The
// stored format is fixed, so the two must agree byte for byte.
func legacyFinish(tb testing.TB, b *GenerationBuilder) []byte {
	tb.Helper()
	if n := len(b.footer.Entries); b.log && n > 0 {
		b.footer.NextSeq = b.footer.Entries[n-1].Seq + 1
	}
	f := bloom.NewWithEstimates(uint(max(len(b.footer.Entries), 1)), filterFalsePositiveRate)
	for _, e := range b.footer.Entries {
		f.AddString(e.Id)
	}
	filter, err := f.MarshalBinary()
	if err != nil {
		tb.Fatal(err)
	}
	fb, err := proto.MarshalOptions{Deterministic: true}.Marshal(&b.footer)
	if err != nil {
		tb.Fatal(err)
	}
	out := append(bytes.Clone(b.buf), filter...)
	footerOffset := uint64(len(out))
	out = append(out, fb...)
	out = binary.LittleEndian.AppendUint64(out, footerOffset)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(fb)))
	out = binary.LittleEndian.AppendUint32(out, Checksum(fb))
	out = binary.LittleEndian.AppendUint32(out, uint32(len(filter)))
	out = binary.LittleEndian.AppendUint32(out, Checksum(filter))
	return append(out, genMagic[:]...)
}

// TestFinishMatchesLegacyEncoding: generations, log batches and fences of
// every size come out byte for byte as the old encoder wrote them, and a
// record added in two parts as the same record added whole.
func TestFinishMatchesLegacyEncoding(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 64, 1000} {
		for _, kind := range []string{"generation", "batch"} {
			t.Run(fmt.Sprintf("%s/records=%d", kind, n), func(t *testing.T) {
				mk := func() *GenerationBuilder {
					if kind == "batch" {
						return NewLogBatchBuilder(LogEntry{Shard: "s/a", Epoch: 4, Position: 9, Writer: "w", PutID: "w-3", Created: 1_800_000_000_123_456_789}, 0)
					}
					return NewGenerationBuilder("s/a", 4, 9, n*40)
				}
				whole, split := mk(), mk()
				for i := range n {
					rec := bytes.Repeat([]byte{byte(i)}, 1+i%50)
					suffix := binary.AppendUvarint([]byte{0x10}, uint64(100+i))
					id := fmt.Sprintf("id-%d", i)
					whole.Add(id, uint64(100+i), append(bytes.Clone(rec), suffix...), uint64(i)*7)
					split.AddSuffixed(id, uint64(100+i), rec, suffix, uint64(i)*7)
				}
				want := legacyFinish(t, whole)
				l, err := split.Finish()
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(l.Data, want) {
					t.Fatalf("%d records: Finish wrote %d bytes that differ from the legacy encoder's %d", n, len(l.Data), len(want))
				}
				if _, err := decodeLayout(l.Data); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
	fence, err := EncodeFence(LogEntry{Shard: "s/a", Epoch: 4, Position: 9, Writer: "w", PutID: "w-3", NextSeq: 12})
	if err != nil {
		t.Fatal(err)
	}
	b := NewGenerationBuilder("s/a", 4, 0, 0)
	b.footer.Position, b.footer.Writer, b.footer.PutId = 9, "w", "w-3"
	b.footer.Fence, b.footer.NextSeq = true, 12
	if want := legacyFinish(t, b); !bytes.Equal(fence.Data, want) {
		t.Fatalf("fence differs from the legacy encoder's")
	}
}

// TestAppendFilterMatchesMarshalBinary: the filter's in-place encoding is
// the library's, for filters of every size the builder makes.
func TestAppendFilterMatchesMarshalBinary(t *testing.T) {
	for _, n := range []int{0, 1, 2, 63, 64, 65, 1000, 5000} {
		entries := make([]*storagepb.FooterEntry, n)
		for i := range entries {
			entries[i] = &storagepb.FooterEntry{Id: fmt.Sprint("id-", i)}
		}
		f := newFilter(entries)
		want, err := f.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got := appendFilter([]byte("prefix"), f)
		if !bytes.Equal(got[6:], want) || len(got)-6 != filterLen(f) {
			t.Fatalf("%d ids: appendFilter wrote %d bytes (filterLen %d), MarshalBinary %d, or their bytes differ", n, len(got)-6, filterLen(f), len(want))
		}
	}
}
