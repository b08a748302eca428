package format

import (
	"encoding/binary"
	"fmt"

	"github.com/bits-and-blooms/bloom/v3"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// filterFalsePositiveRate is the Bloom filters' target: one append in a
// hundred pays an index lookup for an id that is not there.
const filterFalsePositiveRate = 0.01

// maxFilterHashes bounds k in a decoded filter; the library picks far fewer.
const maxFilterHashes = 64

// newFilter is the id filter of a generation or batch holding entries.
func newFilter(entries []*storagepb.FooterEntry) *bloom.BloomFilter {
	f := bloom.NewWithEstimates(uint(max(len(entries), 1)), filterFalsePositiveRate)
	for _, e := range entries {
		f.AddString(e.Id)
	}
	return f
}

// filterLen is the length of f's encoding.
func filterLen(f *bloom.BloomFilter) int { return 24 + 8*filterWords(f) }

// filterWords is the number of 64-bit words in f's encoded bitset.
func filterWords(f *bloom.BloomFilter) int { return int((f.BitSet().Len() + 63) / 64) }

// appendFilter appends the library's encoding of f (what MarshalBinary
// returns: m, k, the bitset's length, then its words, all big-endian)
// without MarshalBinary's buffer and reflective writes, which cost a commit
// of one record as much as the rest of its filter. The stored format is
// big-endian whatever bitset.BinaryOrder says: DecodeFilter reads it with
// the library's default order, which nothing in rolloutd changes.
func appendFilter(dst []byte, f *bloom.BloomFilter) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.Cap()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.K()))
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.BitSet().Len()))
	for _, w := range f.BitSet().Words()[:filterWords(f)] {
		dst = binary.BigEndian.AppendUint64(dst, w)
	}
	return dst
}

// DecodeFilter verifies and parses a generation's id filter. It checks the
// declared sizes against the bytes before the library allocates anything, so
// corrupt input cannot make it allocate more than len(b).
func DecodeFilter(b []byte, crc uint32) (*bloom.BloomFilter, error) {
	if got := Checksum(b); got != crc {
		return nil, fmt.Errorf("%w: id filter checksum %08x, expected %08x", ErrCorrupt, got, crc)
	}
	if len(b) < 24 {
		return nil, fmt.Errorf("%w: id filter of %d bytes is shorter than its header", ErrCorrupt, len(b))
	}
	// The library's encoding: m, k, then a bitset of length m, all big-endian.
	m := binary.BigEndian.Uint64(b[0:8])
	k := binary.BigEndian.Uint64(b[8:16])
	n := binary.BigEndian.Uint64(b[16:24])
	words := (uint64(len(b)) - 24) / 8
	if m == 0 || n != m || k == 0 || k > maxFilterHashes || (m+63)/64 != words || 24+8*words != uint64(len(b)) {
		return nil, fmt.Errorf("%w: id filter declares m=%d k=%d length=%d in %d bytes", ErrCorrupt, m, k, n, len(b))
	}
	f := &bloom.BloomFilter{}
	if err := f.UnmarshalBinary(b); err != nil {
		return nil, fmt.Errorf("%w: id filter: %v", ErrCorrupt, err)
	}
	return f, nil
}
