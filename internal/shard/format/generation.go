package format

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/bits-and-blooms/bloom/v3"

	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// GenerationVersion is the generation format this build writes and reads.
const GenerationVersion = 1

// A generation blob is:
//
//	header   magic "RLGN", version uint32 LE
//	records  each record's protobuf bytes, back to back
//	filter   Bloom filter over the record ids
//	footer   protobuf Footer: id, seq, offset, length and CRC32C per record
//	trailer  footer offset uint64 LE, footer length uint32 LE,
//	         footer CRC32C uint32 LE, filter length uint32 LE,
//	         filter CRC32C uint32 LE, magic "RLGN"
//
// The manifest records where the filter and footer are, so a writer checks
// an id against the small filter with one ranged GET, a reader fetches
// footer+trailer with one, then any record with one more, and each piece is
// verified against its own checksum.
var genMagic = [4]byte{'R', 'L', 'G', 'N'}

const (
	genHeaderLen = 8
	// TrailerLen is the size of a generation's fixed trailer.
	TrailerLen = 8 + 4 + 4 + 4 + 4 + 4
)

// GenerationBuilder assembles one generation blob in memory.
type GenerationBuilder struct {
	buf    []byte
	footer storagepb.Footer
	log    bool // a log batch: Finish sets next_seq
}

// NewGenerationBuilder starts a generation of the shard, written under epoch
// with number gen. sizeHint is the expected size of all records.
func NewGenerationBuilder(shard string, epoch, gen uint64, sizeHint int) *GenerationBuilder {
	b := &GenerationBuilder{buf: make([]byte, 0, genHeaderLen+sizeHint+sizeHint/8+64)}
	b.buf = append(b.buf, genMagic[:]...)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, GenerationVersion)
	b.footer.Shard, b.footer.Epoch, b.footer.Generation = shard, epoch, gen
	return b
}

// Add appends one record's encoded bytes. Records must be added in sequence
// order.
func (b *GenerationBuilder) Add(id string, seq uint64, record []byte, clientHash uint64) {
	b.AddSuffixed(id, seq, record, nil, clientHash)
}

// AddSuffixed is Add of the record whose bytes are record followed by
// suffix, without joining them first: the committer stores a prepared
// record with its seq appended, and would otherwise copy every record once
// more.
func (b *GenerationBuilder) AddSuffixed(id string, seq uint64, record, suffix []byte, clientHash uint64) {
	n := len(record) + len(suffix)
	b.footer.Entries = append(b.footer.Entries, &storagepb.FooterEntry{
		Id:         id,
		Seq:        seq,
		Offset:     uint64(len(b.buf)),
		Length:     uint32(n),
		Crc32C:     crc32.Update(Checksum(record), castagnoli, suffix),
		ClientHash: clientHash,
	})
	b.buf = append(b.buf, record...)
	b.buf = append(b.buf, suffix...)
}

// Len is the number of records added so far.
func (b *GenerationBuilder) Len() int { return len(b.footer.Entries) }

// Layout is a finished generation blob and where its parts are.
type Layout struct {
	Data         []byte
	Footer       *storagepb.Footer
	FooterOffset uint64
	FooterLength uint32
	FilterLength uint32
	FilterCRC    uint32
	// Filter is the id filter, decoded, for the writer's cache.
	Filter *bloom.BloomFilter
}

// FilterOffset is where the id filter starts.
func (l Layout) FilterOffset() uint64 { return l.FooterOffset - uint64(l.FilterLength) }

// Finish completes the blob. It grows the buffer once, to the blob's
// length, and encodes the filter and footer in place.
func (b *GenerationBuilder) Finish() (Layout, error) {
	if n := len(b.footer.Entries); b.log && n > 0 {
		b.footer.NextSeq = b.footer.Entries[n-1].Seq + 1
	}
	bf := newFilter(b.footer.Entries)
	mo := proto.MarshalOptions{Deterministic: true}
	footerLen := mo.Size(&b.footer)
	out := slices.Grow(b.buf, filterLen(bf)+footerLen+TrailerLen)
	filterAt := len(out)
	out = appendFilter(out, bf)
	l := Layout{Footer: &b.footer, Filter: bf, FilterLength: uint32(len(out) - filterAt), FilterCRC: Checksum(out[filterAt:])}
	l.FooterOffset = uint64(len(out))
	mo.UseCachedSize = true
	out, err := mo.MarshalAppend(out, &b.footer)
	if err != nil {
		return Layout{}, fmt.Errorf("encode footer: %w", err)
	}
	fb := out[l.FooterOffset:]
	l.FooterLength = uint32(len(fb))
	out = binary.LittleEndian.AppendUint64(out, l.FooterOffset)
	out = binary.LittleEndian.AppendUint32(out, l.FooterLength)
	out = binary.LittleEndian.AppendUint32(out, Checksum(fb))
	out = binary.LittleEndian.AppendUint32(out, l.FilterLength)
	out = binary.LittleEndian.AppendUint32(out, l.FilterCRC)
	out = append(out, genMagic[:]...)
	l.Data = out
	b.buf = nil
	return l, nil
}

// DecodeFooter verifies and parses a generation's tail: the bytes from
// footerOffset to the end of the blob (footer plus trailer).
func DecodeFooter(tail []byte, footerOffset uint64) (*storagepb.Footer, error) {
	if len(tail) < TrailerLen {
		return nil, fmt.Errorf("%w: generation tail of %d bytes is shorter than its %d-byte trailer", ErrCorrupt, len(tail), TrailerLen)
	}
	tr := tail[len(tail)-TrailerLen:]
	if [4]byte(tr[24:28]) != genMagic {
		return nil, fmt.Errorf("%w: generation trailer has bad magic %q", ErrCorrupt, tr[24:28])
	}
	off := binary.LittleEndian.Uint64(tr[0:8])
	n := binary.LittleEndian.Uint32(tr[8:12])
	if off != footerOffset || uint64(n) != uint64(len(tail)-TrailerLen) {
		return nil, fmt.Errorf("%w: generation trailer says footer at %d+%d, expected %d+%d", ErrCorrupt, off, n, footerOffset, len(tail)-TrailerLen)
	}
	fb := tail[:n]
	if want, got := binary.LittleEndian.Uint32(tr[12:16]), Checksum(fb); want != got {
		return nil, fmt.Errorf("%w: footer checksum %08x, computed %08x", ErrCorrupt, want, got)
	}
	f := &storagepb.Footer{}
	if err := proto.Unmarshal(fb, f); err != nil {
		return nil, fmt.Errorf("%w: footer: %v", ErrCorrupt, err)
	}
	filterLen := uint64(binary.LittleEndian.Uint32(tr[16:20]))
	if filterLen > footerOffset {
		return nil, fmt.Errorf("%w: generation trailer says filter of %d bytes before footer at %d", ErrCorrupt, filterLen, footerOffset)
	}
	recordsEnd := footerOffset - filterLen
	var prevEnd, prevSeq uint64 = genHeaderLen, 0
	for i, e := range f.GetEntries() {
		if e.GetOffset() < prevEnd || e.GetOffset()+uint64(e.GetLength()) > recordsEnd {
			return nil, fmt.Errorf("%w: footer entry %d (%q) at %d+%d is outside the record area or overlaps", ErrCorrupt, i, e.GetId(), e.GetOffset(), e.GetLength())
		}
		if i > 0 && e.GetSeq() <= prevSeq {
			return nil, fmt.Errorf("%w: footer entry %d (%q): seq %d not above %d", ErrCorrupt, i, e.GetId(), e.GetSeq(), prevSeq)
		}
		prevEnd, prevSeq = e.GetOffset()+uint64(e.GetLength()), e.GetSeq()
	}
	return f, nil
}

// DecodeGeneration verifies and parses a whole generation blob, returning its
// footer. Use Record to get each record's bytes.
func DecodeGeneration(data []byte) (*storagepb.Footer, error) {
	l, err := decodeLayout(data)
	return l.Footer, err
}

// decodeLayout verifies and parses a whole generation blob.
func decodeLayout(data []byte) (Layout, error) {
	if len(data) < genHeaderLen+TrailerLen {
		return Layout{}, fmt.Errorf("%w: generation of %d bytes is shorter than its frame", ErrCorrupt, len(data))
	}
	if [4]byte(data[:4]) != genMagic {
		return Layout{}, fmt.Errorf("%w: generation has bad magic %q", ErrCorrupt, data[:4])
	}
	if v := binary.LittleEndian.Uint32(data[4:8]); v != GenerationVersion {
		return Layout{}, fmt.Errorf("%w: generation format version %d, this build reads %d", ErrCorrupt, v, GenerationVersion)
	}
	off := binary.LittleEndian.Uint64(data[len(data)-TrailerLen:])
	if off < genHeaderLen || off > uint64(len(data)-TrailerLen) {
		return Layout{}, fmt.Errorf("%w: generation footer offset %d outside %d..%d", ErrCorrupt, off, genHeaderLen, len(data)-TrailerLen)
	}
	f, err := DecodeFooter(data[off:], off)
	if err != nil {
		return Layout{}, err
	}
	tr := data[len(data)-TrailerLen:]
	filterLen := uint64(binary.LittleEndian.Uint32(tr[16:20]))
	filterCRC := binary.LittleEndian.Uint32(tr[20:24])
	bf, err := DecodeFilter(data[off-filterLen:off], filterCRC)
	if err != nil {
		return Layout{}, err
	}
	for _, e := range f.GetEntries() {
		if _, err := Record(data[e.GetOffset():e.GetOffset()+uint64(e.GetLength())], e); err != nil {
			return Layout{}, err
		}
	}
	return Layout{
		Data: data, Footer: f, FooterOffset: off, FooterLength: uint32(uint64(len(data)-TrailerLen) - off),
		FilterLength: uint32(filterLen), FilterCRC: filterCRC, Filter: bf,
	}, nil
}

// Record verifies one record's bytes (as read by a ranged GET at the entry's
// offset and length) against its footer entry and returns them.
func Record(b []byte, e *storagepb.FooterEntry) ([]byte, error) {
	if uint64(len(b)) != uint64(e.GetLength()) {
		return nil, fmt.Errorf("%w: record %q: read %d bytes, footer says %d", ErrCorrupt, e.GetId(), len(b), e.GetLength())
	}
	if got := Checksum(b); got != e.GetCrc32C() {
		return nil, fmt.Errorf("%w: record %q: checksum %08x, footer says %08x", ErrCorrupt, e.GetId(), got, e.GetCrc32C())
	}
	return b, nil
}
