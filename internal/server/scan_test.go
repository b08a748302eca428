package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func appendN(t *testing.T, c rolloutv1.RolloutServiceClient, shard string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		r := record(fmt.Sprint("r", i))
		r.Role = rolloutv1.Role(1 + i%3)
		r.IncludeInTraining = i%2 == 0
		if i%4 == 0 {
			r.RolloutId = "special"
		}
		if _, err := c.Append(context.Background(), &rolloutv1.AppendRequest{Shard: shard, Records: []*rolloutv1.Record{r}}); err != nil {
			t.Fatal(err)
		}
	}
}

// recv reads a scan stream to its end, returning its records and the final
// status (nil for a clean end).
func recv(stream grpc.ServerStreamingClient[rolloutv1.ScanResponse], upTo int) ([]*rolloutv1.Record, uint64, error) {
	var out []*rolloutv1.Record
	var cursor uint64
	for upTo <= 0 || len(out) < upTo {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, cursor, nil
		}
		if err != nil {
			return out, cursor, err
		}
		out = append(out, resp.GetRecords()...)
		cursor = resp.GetCursor()
	}
	return out, cursor, nil
}

func TestScanFiltersAndProjects(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	appendN(t, ts.client, "s", 0, 24)
	yes := true
	for _, tc := range []struct {
		name string
		req  *rolloutv1.ScanRequest
		want func(i int) bool
	}{
		{"all", &rolloutv1.ScanRequest{}, func(int) bool { return true }},
		{"after a cursor", &rolloutv1.ScanRequest{AfterSeq: 10}, func(i int) bool { return i >= 10 }},
		{"rollout", &rolloutv1.ScanRequest{RolloutId: "special"}, func(i int) bool { return i%4 == 0 }},
		{"role", &rolloutv1.ScanRequest{Role: rolloutv1.Role(2)}, func(i int) bool { return 1+i%3 == 2 }},
		{"training", &rolloutv1.ScanRequest{IncludeInTraining: &yes}, func(i int) bool { return i%2 == 0 }},
		{"limit", &rolloutv1.ScanRequest{Limit: 5}, func(i int) bool { return i < 5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Shard = "s"
			stream, err := ts.client.Scan(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := recv(stream, 0)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range 24 {
				if tc.want(i) {
					want = append(want, fmt.Sprint("r", i))
				}
			}
			var ids []string
			for _, r := range got {
				ids = append(ids, r.GetId())
			}
			if fmt.Sprint(ids) != fmt.Sprint(want) {
				t.Fatalf("scan ids %v, want %v", ids, want)
			}
		})
	}
	stream, err := ts.client.Scan(context.Background(), &rolloutv1.ScanRequest{Shard: "s", Limit: 1, Fields: &fieldmaskpb.FieldMask{Paths: []string{"content", "rolloutId"}}})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := recv(stream, 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("projected scan: %v, %v", got, err)
	}
	want := &rolloutv1.Record{Id: "r0", Seq: 1, Content: "content of r0", RolloutId: "special"}
	if !proto.Equal(got[0], want) {
		t.Fatalf("projected record %v, want %v", got[0], want)
	}
}

func TestScanRejects(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	appendN(t, ts.client, "s", 0, 1)
	for _, tc := range []struct {
		req   *rolloutv1.ScanRequest
		code  codes.Code
		field string
	}{
		{&rolloutv1.ScanRequest{Shard: "../x"}, codes.InvalidArgument, "shard"},
		{&rolloutv1.ScanRequest{Shard: ""}, codes.InvalidArgument, "shard"},
		{&rolloutv1.ScanRequest{Shard: "s", Fields: &fieldmaskpb.FieldMask{Paths: []string{"nope"}}}, codes.InvalidArgument, "fields.paths[0]"},
		{&rolloutv1.ScanRequest{Shard: "s", Fields: &fieldmaskpb.FieldMask{Paths: []string{"relationships.weight"}}}, codes.InvalidArgument, "fields.paths[0]"},
		// No cursor to resume from: the message says why, not where.
		{&rolloutv1.ScanRequest{Shard: "never-written"}, codes.NotFound, `shard "never-written": shard not found; it has never been written (a Scan with follow waits for its first record)`},
	} {
		stream, err := ts.client.Scan(context.Background(), tc.req)
		if err == nil {
			_, _, err = recv(stream, 0)
		}
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.field) {
			t.Errorf("Scan(%v) = %v, want %v naming %q", tc.req, err, tc.code, tc.field)
		}
	}
}

// Follow delivers every later commit exactly once, from the same instance and
// from another, and shutdown ends the stream with a resumable status.
func TestScanFollow(t *testing.T) {
	store := memstore.New()
	a := startServer(t, Config{Store: store})
	b := startServer(t, Config{Store: store})
	appendN(t, a.client, "s", 0, 3)
	for _, tc := range []struct {
		name     string
		follower *testServer
	}{{"same instance", a}, {"other instance", b}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start, err := a.client.Scan(ctx, &rolloutv1.ScanRequest{Shard: "s"})
			if err != nil {
				t.Fatal(err)
			}
			before, cursor, err := recv(start, 0)
			if err != nil {
				t.Fatal(err)
			}
			stream, err := tc.follower.client.Scan(ctx, &rolloutv1.ScanRequest{Shard: "s", AfterSeq: cursor, Follow: true})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan []*rolloutv1.Record, 1)
			go func() {
				got, _, err := recv(stream, 10)
				if err != nil {
					t.Errorf("follow: %v", err)
				}
				done <- got
			}()
			appendN(t, a.client, "s", 100+len(before), 10)
			select {
			case got := <-done:
				for i, r := range got {
					if r.GetSeq() != cursor+uint64(i)+1 {
						t.Fatalf("follow record %d has seq %d, want %d", i, r.GetSeq(), cursor+uint64(i)+1)
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatal("follow did not deliver the new commits")
			}
		})
	}
	// Shutdown ends a follow stream with Unavailable naming the cursor.
	stream, err := b.client.Scan(context.Background(), &rolloutv1.ScanRequest{Shard: "s", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { b.stop(t); close(stopped) }()
	_, cursor, err := recv(stream, 0)
	<-stopped
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "after_seq=") {
		t.Fatalf("follow at shutdown ended with %v, want Unavailable naming after_seq", err)
	}
	// A client resumes from the ErrorInfo metadata, not the text.
	if cursor == 0 {
		cursor = first.GetCursor()
	}
	d := detailsOf(t, status.Convert(err))
	if d.reason(t) != rolloutv1.ErrorReason_SCAN_INTERRUPTED.String() || d.info.GetMetadata()[MetadataResumeAfterSeq] != strconv.FormatUint(cursor, 10) {
		t.Errorf("follow at shutdown: details %v, want %s with %s=%d", status.Convert(err).Details(), rolloutv1.ErrorReason_SCAN_INTERRUPTED.String(), MetadataResumeAfterSeq, cursor)
	}
}

// Scan batches are sized by the bytes sent: with fields [id], eight 1 MiB
// records come back in one batch; whole, in one batch each.
func TestScanBatchesBySentBytes(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	const n = 8
	for i := range n {
		rec := &rolloutv1.Record{Id: fmt.Sprintf("big-%d", i), Content: strings.Repeat("x", 1<<20)}
		if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{rec}}); err != nil {
			t.Fatal(err)
		}
	}
	batches := func(req *rolloutv1.ScanRequest) (int, int) {
		stream, err := ts.client.Scan(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var b, records int
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return b, records
			}
			if err != nil {
				t.Fatal(err)
			}
			b++
			records += len(resp.GetRecords())
		}
	}
	if b, r := batches(&rolloutv1.ScanRequest{Shard: "s", Fields: &fieldmaskpb.FieldMask{Paths: []string{"id"}}}); b != 1 || r != n {
		t.Errorf("fields [id]: %d records in %d batches, want %d in 1", r, b, n)
	}
	if b, r := batches(&rolloutv1.ScanRequest{Shard: "s"}); b != n || r != n {
		t.Errorf("whole records: %d records in %d batches, want %d in %d", r, b, n, n)
	}
}
