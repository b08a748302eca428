package server

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// Attack 1 at a small scale: one BatchGet naming one large record a
// thousand times is refused before anything is read, instead of building a
// response that holds the record a thousand times.
func TestBatchGetRepeatedIDBuildsNothing(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	rec := record("big")
	rec.Content = strings.Repeat("x", 64<<10)
	if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{rec}}); err != nil {
		t.Fatal(err)
	}
	req := &rolloutv1.BatchGetRequest{Shard: "s", Ids: make([]string, 1000)}
	for i := range req.Ids {
		req.Ids[i] = "big"
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ts.client.BatchGet(ctx, req)
	runtime.ReadMemStats(&after)
	wantReason(t, "BatchGet of one id 1000 times", err, codes.InvalidArgument, "")
	if !strings.Contains(err.Error(), "ids[1]") {
		t.Errorf("the refusal does not name the repeat: %v", err)
	}
	// The response would have held 64 MiB of copies.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("the refused BatchGet allocated %d bytes", grew)
	}
}

// The response cap counts what is sent: ids are sent twice (in the result
// and in its record) and every result has framing, so records with long
// ids would take a response past the cap if only stored bytes counted.
func TestBatchGetCapCountsSentBytes(t *testing.T) {
	const capBytes = 10000
	ts := startServer(t, Config{Store: memstore.New(), BatchGetBytes: capBytes})
	ctx := context.Background()
	var want []string
	req := &rolloutv1.AppendRequest{Shard: "s"}
	for i := range 60 {
		id := fmt.Sprintf("%s-%03d", strings.Repeat("i", 100), i)
		want = append(want, id)
		req.Records = append(req.Records, &rolloutv1.Record{Id: id, Content: strings.Repeat("c", 50)})
	}
	if _, err := ts.client.Append(ctx, req); err != nil {
		t.Fatal(err)
	}
	returned := 0
	for len(want) > 0 {
		resp, err := ts.client.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: "s", Ids: want})
		if err != nil {
			t.Fatal(err)
		}
		if n := proto.Size(resp); n > capBytes {
			t.Fatalf("a BatchGet response of %d bytes, over the cap of %d", n, capBytes)
		}
		var again []string
		for _, r := range resp.GetResults() {
			switch {
			case r.GetRecord() != nil:
				returned++
			case r.GetOverLimit():
				again = append(again, r.GetId())
			default:
				t.Fatalf("result %v", r)
			}
		}
		if len(again) == len(want) {
			t.Fatal("no progress")
		}
		want = again
	}
	if returned != 60 {
		t.Fatalf("returned %d records, want 60", returned)
	}
}
