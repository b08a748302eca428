package localstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// A blob file is a header followed by the content. The header carries the
// ETag and PutID, so one rename publishes content and metadata together.
//
//	magic   8 bytes  "RLDBLOB1"
//	hlen    uint32   length of the whole header, magic and checksum included
//	mtime   int64    Unix nanoseconds of the write
//	etag    uint16 length + bytes
//	putID   uint32 length + bytes
//	name    uint16 length + bytes (the full blob name)
//	crc     uint32   CRC-32C of every header byte before it
//
// All integers are big-endian.
const (
	magic         = "RLDBLOB1"
	minHeader     = len(magic) + 4 + 8 + 2 + 4 + 2 + 4
	maxHeader     = 1 << 20
	headerReadLen = 4096
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt marks a blob file whose header does not decode.
var errCorrupt = errors.New("localstore: corrupt blob file")

type header struct {
	attrs blob.Attrs // Size is not stored; it comes from the file size
	len   int64
}

func encodeHeader(a blob.Attrs) ([]byte, error) {
	if len(a.ETag) > 0xffff || len(a.Name) > 0xffff || len(a.PutID) > maxHeader/2 {
		return nil, fmt.Errorf("localstore: put %q: PutID of %d bytes is too long", a.Name, len(a.PutID))
	}
	n := minHeader + len(a.ETag) + len(a.PutID) + len(a.Name)
	b := make([]byte, 0, n)
	b = append(b, magic...)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint64(b, uint64(a.LastModified.UnixNano()))
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.ETag)))
	b = append(b, a.ETag...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.PutID)))
	b = append(b, a.PutID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Name)))
	b = append(b, a.Name...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return b, nil
}

// decodeHeader decodes the header at the start of b, which must hold all of it.
func decodeHeader(b []byte) (header, error) {
	if len(b) < minHeader || string(b[:len(magic)]) != magic {
		return header{}, fmt.Errorf("%w: bad magic", errCorrupt)
	}
	n := int(binary.BigEndian.Uint32(b[len(magic):]))
	if n < minHeader || n > len(b) {
		return header{}, fmt.Errorf("%w: header length %d", errCorrupt, n)
	}
	b = b[:n]
	if crc32.Checksum(b[:n-4], crcTable) != binary.BigEndian.Uint32(b[n-4:]) {
		return header{}, fmt.Errorf("%w: header checksum mismatch", errCorrupt)
	}
	r := bytes.NewReader(b[len(magic)+4 : n-4])
	var mtime int64
	var l16 uint16
	var l32 uint32
	var h header
	h.len = int64(n)
	read := func(l int) string {
		s := make([]byte, l)
		if _, err := io.ReadFull(r, s); err != nil {
			return ""
		}
		return string(s)
	}
	if binary.Read(r, binary.BigEndian, &mtime) != nil || binary.Read(r, binary.BigEndian, &l16) != nil {
		return header{}, fmt.Errorf("%w: short header", errCorrupt)
	}
	h.attrs.ETag = blob.ETag(read(int(l16)))
	if binary.Read(r, binary.BigEndian, &l32) != nil || int64(l32) > int64(r.Len()) {
		return header{}, fmt.Errorf("%w: short header", errCorrupt)
	}
	h.attrs.PutID = read(int(l32))
	if binary.Read(r, binary.BigEndian, &l16) != nil {
		return header{}, fmt.Errorf("%w: short header", errCorrupt)
	}
	h.attrs.Name = read(int(l16))
	if r.Len() != 0 || h.attrs.ETag == "" || len(h.attrs.Name) != int(l16) {
		return header{}, fmt.Errorf("%w: header fields do not add up", errCorrupt)
	}
	h.attrs.LastModified = time.Unix(0, mtime)
	return h, nil
}

// headerLen returns the header length a file starting with b declares, so
// that a reader knows how much more to read.
func headerLen(b []byte) (int, error) {
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return 0, fmt.Errorf("%w: bad magic", errCorrupt)
	}
	n := int(binary.BigEndian.Uint32(b[len(magic):]))
	if n < minHeader || n > maxHeader {
		return 0, fmt.Errorf("%w: header length %d", errCorrupt, n)
	}
	return n, nil
}
