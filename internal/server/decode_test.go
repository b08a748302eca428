package server

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// rawCodec sends a []byte as the message, whatever the method expects.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.([]byte)
	if !ok {
		return nil, errors.New("rawCodec sends []byte only")
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return errors.New("rawCodec receives into *[]byte only")
	}
	*p = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// notProto does not decode as any message: a tag whose varint never ends.
var notProto = []byte{0xff, 0xff, 0xff}

// Requests that do not decode reach no handler and no access log; they are
// counted by method, unary and streaming alike. Requests that decode, or
// that are refused for their size, are not counted.
func TestDecodeFailuresCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServer(t, Config{Store: memstore.New(), Registerer: reg, MaxMessageBytes: 1 << 20, MaxRecordBytes: 1 << 19})
	raw := grpc.ForceCodecV2(rawCodec{})
	failures := func(method string) float64 {
		return testutil.ToFloat64(ts.metrics.decodeFailures.WithLabelValues(method))
	}

	var out []byte
	err := ts.conn.Invoke(rpcCtx(t), "/rollout.v1.RolloutService/Append", notProto, &out, raw)
	if status.Code(err) != codes.Internal {
		t.Fatalf("Append of bytes that are not protobuf: %v", err)
	}
	for range 2 {
		stream, err := ts.conn.NewStream(rpcCtx(t), &grpc.StreamDesc{ServerStreams: true}, "/rollout.v1.RolloutService/Scan", raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.SendMsg(notProto); err != nil {
			t.Fatal(err)
		}
		if err := stream.RecvMsg(&out); status.Code(err) != codes.Internal {
			t.Fatalf("Scan of bytes that are not protobuf: %v", err)
		}
	}
	// Not counted: a request that decodes, and one over the size limit.
	if _, err := ts.client.Append(rpcCtx(t), appendReq("s", "a")); err != nil {
		t.Fatal(err)
	}
	if err := ts.conn.Invoke(rpcCtx(t), "/rollout.v1.RolloutService/Get", make([]byte, 2<<20), &out, raw); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Get over the size limit: %v", err)
	}
	if _, err := ts.client.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "s", Id: "a"}); err != nil {
		t.Fatal(err)
	}

	for method, want := range map[string]float64{"Append": 1, "Scan": 2, "Get": 0, "Check": 0} {
		if got := failures(method); got != want {
			t.Errorf(`rolloutd_rpc_decode_failures_total{method=%q} = %v, want %v`, method, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "rolloutd_rpc_decode_failures_total"); n != len(requestMethods) {
		t.Errorf("%d series, want one per method (%d), exported from the start", n, len(requestMethods))
	}
}

// Every request message maps to its method's label; anything else is
// "other", so a client cannot grow the label set.
func TestDecodeMethod(t *testing.T) {
	for v, want := range map[any]string{
		&rolloutv1.AppendRequest{}: "Append",
		&rolloutv1.GetRequest{}:    "Get",
		&rolloutv1.ScanRequest{}:   "Scan",
		&rolloutv1.Record{}:        "other",
		new([]byte):                "other",
	} {
		if got := decodeMethod(v); got != want {
			t.Errorf("decodeMethod(%T) = %q, want %q", v, got, want)
		}
	}
}
