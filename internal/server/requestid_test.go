package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
)

const testRequestID = "0b9ad2f1-3f4e-4c1b-9a55-6f0c1d2e3a4b"

// mixedBatch is a request with a request_id whose records 0 and 2 have no
// id and record 1 has the caller's.
func mixedBatch(shardName string) *rolloutv1.AppendRequest {
	reward := float32(1)
	return &rolloutv1.AppendRequest{Shard: shardName, RequestId: testRequestID, Records: []*rolloutv1.Record{
		{RolloutId: "rollout-42", Role: rolloutv1.Role_ROLE_ASSISTANT, Content: "The answer is 4."},
		{Id: "caller-1", RolloutId: "rollout-42", Content: "mine"},
		{RolloutId: "rollout-42", Role: rolloutv1.Role_ROLE_GRADE, Reward: &reward},
	}}
}

func recordCount(t *testing.T, store *memstore.Store, shardName string) uint64 {
	t.Helper()
	m, err := shard.NewReader(store, shard.ReaderOptions{}).Manifest(context.Background(), shardName)
	if err != nil {
		t.Fatal(err)
	}
	return m.GetRecordCount()
}

// A request with a request_id, sent again, comes back with the same ids and
// seqs, every record already_present, and nothing stored twice. Records
// without an id get the ids derived from (shard, request_id, index); the
// caller's id is kept.
func TestRequestIDMakesAResendIdempotent(t *testing.T) {
	store := memstore.New()
	ts := startServer(t, Config{Store: store})
	ctx := context.Background()
	req := mixedBatch("exp/run1")

	first, err := ts.client.Append(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs := []string{shard.DeriveID("exp/run1", testRequestID, 0), "caller-1", shard.DeriveID("exp/run1", testRequestID, 2)}
	for i, r := range first.GetResults() {
		if r.GetId() != wantIDs[i] || r.GetAlreadyPresent() {
			t.Errorf("first send, result %d: %v, want id %s, not already present", i, r, wantIDs[i])
		}
	}
	again, err := ts.client.Append(ctx, req)
	if err != nil {
		t.Fatalf("resend: %v", err)
	}
	for i, r := range again.GetResults() {
		f := first.GetResults()[i]
		if r.GetId() != f.GetId() || r.GetSeq() != f.GetSeq() || r.GetGeneration() != f.GetGeneration() || !r.GetAlreadyPresent() {
			t.Errorf("resend, result %d: %v, want id %s seq %d, already present", i, r, f.GetId(), f.GetSeq())
		}
	}
	if n := recordCount(t, store, "exp/run1"); n != 3 {
		t.Errorf("shard holds %d records after a resend of 3, want 3", n)
	}
	got, err := ts.client.Get(ctx, &rolloutv1.GetRequest{Shard: "exp/run1", Id: wantIDs[2]})
	if err != nil || got.GetRecord().GetRole() != rolloutv1.Role_ROLE_GRADE {
		t.Errorf("Get of the derived id %s: %v %v", wantIDs[2], got, err)
	}
}

// The same request_id on another shard derives other ids.
func TestRequestIDIsPerShard(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	a, err := ts.client.Append(context.Background(), mixedBatch("exp/a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ts.client.Append(context.Background(), mixedBatch("exp/b"))
	if err != nil {
		t.Fatal(err)
	}
	if a.GetResults()[0].GetId() == b.GetResults()[0].GetId() || b.GetResults()[0].GetAlreadyPresent() {
		t.Errorf("shards a and b: %v and %v, want different ids, both new", a.GetResults()[0], b.GetResults()[0])
	}
}

// A request_id reused with different content for an id-less record is
// AlreadyExists, naming the derived id and the request_id, and stores
// nothing.
func TestRequestIDReusedForOtherContentConflicts(t *testing.T) {
	store := memstore.New()
	ts := startServer(t, Config{Store: store})
	ctx := context.Background()
	if _, err := ts.client.Append(ctx, mixedBatch("exp/run1")); err != nil {
		t.Fatal(err)
	}
	other := mixedBatch("exp/run1")
	other.Records[2].Reward = new(float32(0))
	_, err := ts.client.Append(ctx, other)
	st := status.Convert(err)
	derived := shard.DeriveID("exp/run1", testRequestID, 2)
	if st.Code() != codes.AlreadyExists || !strings.Contains(st.Message(), derived) || !strings.Contains(st.Message(), testRequestID) {
		t.Errorf("reused request_id: %v %q, want AlreadyExists naming %s and %s", st.Code(), st.Message(), derived, testRequestID)
	}
	if n := recordCount(t, store, "exp/run1"); n != 3 {
		t.Errorf("shard holds %d records, want the first request's 3", n)
	}
}

// A conflict on an id the caller set is the caller's own: its message does
// not send them looking at the request_id.
func TestCallerIDConflictDoesNotBlameTheRequestID(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	if _, err := ts.client.Append(ctx, mixedBatch("exp/run1")); err != nil {
		t.Fatal(err)
	}
	other := mixedBatch("exp/run1")
	other.RequestId = "another-request"
	other.Records[1].Content = "not mine after all"
	_, err := ts.client.Append(ctx, other)
	st := status.Convert(err)
	if st.Code() != codes.AlreadyExists || !strings.Contains(st.Message(), "caller-1") || strings.Contains(st.Message(), "request_id") {
		t.Errorf("conflict on a caller-set id: %v %q, want AlreadyExists naming caller-1 and no request_id", st.Code(), st.Message())
	}
}

// Without a request_id, an id-less record sent twice is stored twice, with
// two ids: the behaviour the proto and README document.
func TestWithoutRequestIDAResendStoresTwice(t *testing.T) {
	store := memstore.New()
	ts := startServer(t, Config{Store: store})
	ctx := context.Background()
	req := mixedBatch("exp/run1")
	req.RequestId = ""
	first, err := ts.client.Append(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ts.client.Append(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := first.GetResults()[0], again.GetResults()[0]; a.GetId() == b.GetId() || b.GetAlreadyPresent() {
		t.Errorf("id-less record sent twice: %v then %v, want two ids, both new", a, b)
	}
	if b := again.GetResults()[1]; !b.GetAlreadyPresent() {
		t.Errorf("caller-id record sent twice: %v, want already present", b)
	}
	if n := recordCount(t, store, "exp/run1"); n != 5 {
		t.Errorf("shard holds %d records, want 5 (two copies of each id-less record)", n)
	}
}

// A caller-set id that equals an id derived for another record of the same
// request is refused: the batch would hold one id twice.
func TestRequestIDDerivedIDClashesWithCallerID(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	req := mixedBatch("exp/run1")
	req.Records[1].Id = shard.DeriveID("exp/run1", testRequestID, 0)
	_, err := ts.client.Append(context.Background(), req)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "records[1].id") {
		t.Errorf("got %v %q, want InvalidArgument naming records[1].id", st.Code(), st.Message())
	}
	bad := mixedBatch("exp/run1")
	bad.RequestId = "not/valid"
	_, err = ts.client.Append(context.Background(), bad)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "request_id") {
		t.Errorf("bad request_id: %v %q, want InvalidArgument naming request_id", st.Code(), st.Message())
	}
}

// The handler does not modify the request it derives ids for.
func TestRequestIDLeavesTheRequestAlone(t *testing.T) {
	store := memstore.New()
	svc := newTestService(t, store, 4, (&countingOpen{store: store, opts: testWriterOptions(t)}).open)
	req := mixedBatch("exp/run1")
	before := proto.Clone(req)
	if _, err := svc.Append(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, req) {
		t.Errorf("Append modified the request: %v, sent %v", req, before)
	}
}
