package server

import (
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// defaultRecvLimit is what grpc-go, grpcio and grpc-js receive by default.
const defaultRecvLimit = 4 << 20

// recordOfSize returns a record without an id or created_at (the server
// fills both) whose encoding is exactly n bytes.
func recordOfSize(t *testing.T, n int) *rolloutv1.Record {
	t.Helper()
	rec := &rolloutv1.Record{Role: rolloutv1.Role_ROLE_ARTIFACT}
	rec.Content = strings.Repeat("x", n-proto.Size(rec)-1-4) // tag and a 4-byte length
	if got := proto.Size(rec); got != n {
		t.Fatalf("record of %d bytes, want %d", got, n)
	}
	return rec
}

// The arithmetic of DefaultMaxRecordBytes: a record at the limit, stored
// with the longest id, created_at and seq the server could add, fits a
// GetResponse and a one-record ScanResponse (with the largest cursor) of at
// most 4 MiB, exactly; one byte more would not.
func TestDefaultMaxRecordBytesFitsADefaultClient(t *testing.T) {
	for _, tt := range []struct {
		extra int
		fits  bool
	}{{0, true}, {1, false}} {
		rec := recordOfSize(t, DefaultMaxRecordBytes+tt.extra)
		rec.Id = strings.Repeat("i", 128)
		rec.CreatedAt = &timestamppb.Timestamp{Seconds: -62135596800, Nanos: 999_999_999} // 0001-01-01: the longest encoding
		rec.Seq = math.MaxUint64
		get := proto.Size(&rolloutv1.GetResponse{Record: rec})
		scan := proto.Size(&rolloutv1.ScanResponse{Records: []*rolloutv1.Record{rec}, Cursor: math.MaxUint64})
		if fits := get <= defaultRecvLimit && scan <= defaultRecvLimit; fits != tt.fits {
			t.Errorf("a record of DefaultMaxRecordBytes+%d, stored: GetResponse %d bytes, ScanResponse %d, limit %d; fits = %v, want %v",
				tt.extra, get, scan, defaultRecvLimit, fits, tt.fits)
		}
		if tt.extra == 0 && scan != defaultRecvLimit {
			t.Errorf("at the limit, the worst ScanResponse is %d bytes; the bound is not tight (want %d)", scan, defaultRecvLimit)
		}
	}
}

// A grpc-go client with default options (no MaxCallRecvMsgSize), over TCP,
// reads back the largest record a default server accepts, with Get and with
// Scan (raw and decoded, after a batch's worth of smaller records); the
// server refuses a record one byte larger.
func TestDefaultClientReadsTheLargestRecord(t *testing.T) {
	ts := startTCP(t, Config{})
	c := dial(t, ts.addr, nil) // grpc.NewClient with transport credentials only
	ctx := rpcCtx(t)

	small := &rolloutv1.AppendRequest{Shard: "big"}
	for range 9 {
		small.Records = append(small.Records, &rolloutv1.Record{Content: strings.Repeat("s", 100<<10)})
	}
	if _, err := c.Append(ctx, small); err != nil {
		t.Fatal(err)
	}
	big := recordOfSize(t, DefaultMaxRecordBytes)
	resp, err := c.Append(ctx, &rolloutv1.AppendRequest{Shard: "big", Records: []*rolloutv1.Record{big}})
	if err != nil {
		t.Fatalf("Append of a %d-byte record: %v", DefaultMaxRecordBytes, err)
	}
	id := resp.GetResults()[0].GetId()

	over := recordOfSize(t, DefaultMaxRecordBytes+1)
	_, err = c.Append(ctx, &rolloutv1.AppendRequest{Shard: "big", Records: []*rolloutv1.Record{over}})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "records[0]") {
		t.Errorf("Append of a record one byte over the limit: %v %q, want ResourceExhausted naming records[0]", st.Code(), st.Message())
	}

	got, err := c.Get(ctx, &rolloutv1.GetRequest{Shard: "big", Id: id})
	if err != nil {
		t.Fatalf("a default client's Get of the largest record: %v", err)
	}
	if got.GetRecord().GetContent() != big.GetContent() {
		t.Error("Get returned other content")
	}
	t.Logf("GetResponse of the largest record: %d bytes (limit %d)", proto.Size(got), defaultRecvLimit)

	no := false
	for _, req := range []*rolloutv1.ScanRequest{
		{Shard: "big"},                         // raw: stored records forwarded as they are
		{Shard: "big", IncludeInTraining: &no}, // decoded and re-encoded
	} {
		stream, err := c.Scan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var n, biggest int
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("a default client's Scan %v, after %d records: %v", req, n, err)
			}
			n += len(resp.GetRecords())
			biggest = max(biggest, proto.Size(resp))
		}
		if n != 10 {
			t.Errorf("Scan %v: %d records, want 10", req, n)
		}
		t.Logf("Scan %v: largest batch %d bytes", req, biggest)
	}
}
