package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// passthroughCodec is the server's gRPC codec: the standard proto codec,
// except that a scanFrame is sent as the bytes it already holds. An
// unfiltered Scan forwards stored records as they are (checksum-verified)
// instead of decoding each and encoding it again.
//
// It also counts the requests that do not decode, by method: a request that
// fails to decode never reaches an interceptor, and gRPC's stats API has no
// event for it (only an End whose error text says so), while every decode
// of a request passes here.
type passthroughCodec struct {
	encoding.CodecV2 // the proto codec
	decodeFailures   *prometheus.CounterVec
}

func newPassthroughCodec(decodeFailures *prometheus.CounterVec) passthroughCodec {
	return passthroughCodec{CodecV2: encoding.GetCodecV2("proto"), decodeFailures: decodeFailures}
}

// Unmarshal decodes with the proto codec, counting failures.
func (c passthroughCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if err != nil && c.decodeFailures != nil {
		c.decodeFailures.WithLabelValues(decodeMethod(v)).Inc()
	}
	return err
}

// requestMethods maps the request message of each RolloutService method to
// the method's name, and grpc.health.v1's to Check (Watch shares it).
var requestMethods = func() map[protoreflect.FullName]string {
	m := map[protoreflect.FullName]string{
		(&healthpb.HealthCheckRequest{}).ProtoReflect().Descriptor().FullName(): "Check",
	}
	methods := rolloutv1.File_rollout_v1_rollout_proto.Services().ByName("RolloutService").Methods()
	for i := range methods.Len() {
		m[methods.Get(i).Input().FullName()] = string(methods.Get(i).Name())
	}
	return m
}()

// decodeMethod is the method label of a request that failed to decode into
// v: its method, or "other" (reflection). The set is fixed, whatever method
// name a client sends.
func decodeMethod(v any) string {
	if m, ok := v.(proto.Message); ok {
		if name, ok := requestMethods[m.ProtoReflect().Descriptor().FullName()]; ok {
			return name
		}
	}
	return "other"
}

// Marshal sends a scanFrame's bytes as they are, and encodes anything else
// with the proto codec. A charged response's buffer holds its charge until
// the transport frees it (responses.go).
func (c passthroughCodec) Marshal(v any) (mem.BufferSlice, error) {
	if cr, ok := v.(*chargedReply); ok {
		return cr.marshal(c)
	}
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

// scanFrameSize is the size of newScanFrame(records, cursor).
func scanFrameSize(records [][]byte, cursor uint64) int {
	n := 0
	for _, r := range records {
		n += protowire.SizeTag(scanResponseRecords) + protowire.SizeBytes(len(r))
	}
	if cursor != 0 {
		n += protowire.SizeTag(scanResponseCursor) + protowire.SizeVarint(cursor)
	}
	return n
}

// newScanFrame encodes a ScanResponse of already-encoded records.
func newScanFrame(records [][]byte, cursor uint64) *scanFrame {
	b := make([]byte, 0, scanFrameSize(records, cursor))
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

// Field numbers of rollout.v1.SubscribeResponse.
const (
	subscribeResponseShard   = 1
	subscribeResponseRecords = 2
	subscribeResponseCursor  = 3
)

// subscribeFrameSize is the size of newSubscribeFrame(shard, records,
// cursor).
func subscribeFrameSize(shard string, records [][]byte, cursor uint64) int {
	n := protowire.SizeTag(subscribeResponseShard) + protowire.SizeBytes(len(shard))
	for _, r := range records {
		n += protowire.SizeTag(subscribeResponseRecords) + protowire.SizeBytes(len(r))
	}
	if cursor != 0 {
		n += protowire.SizeTag(subscribeResponseCursor) + protowire.SizeVarint(cursor)
	}
	return n
}

// newSubscribeFrame encodes a SubscribeResponse of one shard's
// already-encoded records, as the proto codec would encode it.
func newSubscribeFrame(shard string, records [][]byte, cursor uint64) *scanFrame {
	b := make([]byte, 0, subscribeFrameSize(shard, records, cursor))
	b = protowire.AppendTag(b, subscribeResponseShard, protowire.BytesType)
	b = protowire.AppendString(b, shard)
	for _, r := range records {
		b = protowire.AppendTag(b, subscribeResponseRecords, protowire.BytesType)
		b = protowire.AppendBytes(b, r)
	}
	if cursor != 0 {
		b = protowire.AppendTag(b, subscribeResponseCursor, protowire.VarintType)
		b = protowire.AppendVarint(b, cursor)
	}
	return &scanFrame{wire: b}
}
