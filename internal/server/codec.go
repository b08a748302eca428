package server

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// passthroughCodec is the server's gRPC codec: the standard proto codec,
// except that a scanFrame is sent as the bytes it already holds. An
// unfiltered Scan forwards stored records as they are (checksum-verified)
// instead of decoding each and encoding it again.
type passthroughCodec struct {
	encoding.CodecV2 // the proto codec
}

func newPassthroughCodec() passthroughCodec {
	return passthroughCodec{CodecV2: encoding.GetCodecV2("proto")}
}

// Marshal sends a scanFrame's bytes as they are, and encodes anything else
// with the proto codec.
func (c passthroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*scanFrame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.wire)}, nil
	}
	return c.CodecV2.Marshal(v)
}

// scanFrame is a rollout.v1.ScanResponse in wire form.
type scanFrame struct{ wire []byte }

// Field numbers of rollout.v1.ScanResponse.
const (
	scanResponseRecords = 1
	scanResponseCursor  = 2
)

// newScanFrame encodes a ScanResponse of already-encoded records.
func newScanFrame(records [][]byte, cursor uint64) *scanFrame {
	n := 11
	for _, r := range records {
		n += len(r) + 6
	}
	b := make([]byte, 0, n)
	for _, r := range records {
		b = protowire.AppendTag(b, scanResponseRecords, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	if cursor != 0 {
		b = protowire.AppendTag(b, scanResponseCursor, protowire.VarintType)
		b = protowire.AppendVarint(b, cursor)
	}
	return &scanFrame{wire: b}
}
