package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// errorInfo is err's ErrorInfo, or nil.
func errorInfo(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

func wantReason(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
	if ei := errorInfo(err); reason != "" && (ei == nil || ei.GetReason() != reason || ei.GetDomain() != ErrorDomain) {
		t.Fatalf("%s: ErrorInfo %v, want reason %s", what, ei, reason)
	}
}

// generationEpochs lists the epochs of a shard's generation blobs.
func generationEpochs(t *testing.T, store blob.Store, shardName string) []uint64 {
	t.Helper()
	var out []uint64
	page, err := store.List(context.Background(), blob.ListOptions{Prefix: format.GenerationPrefix(shardName)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		if e, _, ok := format.ParseGenerationName(shardName, it.Name); ok {
			out = append(out, e)
		}
	}
	return out
}

// The lifecycle RPCs end to end on one instance: describe, batch get,
// list, a conditional delete refused then done, reads of the deleted
// records and a follower across the delete, the next incarnation, and
// the background purge.
func TestLifecycleRPCs(t *testing.T) {
	store := memstore.New()
	ts := startServer(t, Config{Store: store, BatchGetBytes: 1000})
	c := ts.client
	ctx := context.Background()
	for i := range 3 {
		if _, err := c.Append(ctx, appendReq("exp/a", ids(fmt.Sprintf("b%d", i), 4)...)); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"exp/b", "exp-x", "expo"} {
		if _, err := c.Append(ctx, appendReq(s, "one")); err != nil {
			t.Fatal(err)
		}
	}

	info, err := c.DescribeShard(ctx, &rolloutv1.DescribeShardRequest{Shard: "exp/a"})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetRecords() != 12 || info.GetFirstSeq() != 1 || info.GetLastSeq() != 12 || info.GetEpoch() == 0 || !info.GetWriterHere() ||
		info.GetFormatVersion() != format.ManifestVersionV2 || info.GetCreatedAt() == nil || info.GetLastCommitAt() == nil || info.GetBytes() == 0 {
		t.Fatalf("DescribeShard = %v", info)
	}
	_, err = c.DescribeShard(ctx, &rolloutv1.DescribeShardRequest{Shard: "never"})
	wantReason(t, "DescribeShard of a shard never written", err, codes.NotFound, "")

	req := []string{"b0-1", "nope", "b2-3", "b1-0", "b1-1", "b1-2"}
	bg, err := c.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: "exp/a", Ids: req})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, r := range bg.GetResults() {
		if r.GetId() != req[i] {
			t.Fatalf("result %d is for %q, want %q", i, r.GetId(), req[i])
		}
		switch {
		case r.GetRecord() != nil:
			if r.GetRecord().GetId() != req[i] {
				t.Fatalf("result %d holds %q", i, r.GetRecord().GetId())
			}
			kinds = append(kinds, "r")
		case r.GetNotFound():
			kinds = append(kinds, "n")
		case r.GetOverLimit():
			kinds = append(kinds, "o")
		}
	}
	// Each record is about 100 bytes stored: 1000 bytes hold all of them
	// but the cap is reached within the request; what is past it is over.
	if got := strings.Join(kinds, ""); !strings.HasPrefix(got, "rnrr") || strings.Count(got, "n") != 1 {
		t.Fatalf("BatchGet results %q", got)
	}
	_, err = c.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: "exp/a", Ids: []string{"b0-1", "nope", "b0-1"}})
	wantReason(t, "BatchGet of a repeated id", err, codes.InvalidArgument, "")
	_, err = c.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: "exp/a", Ids: make([]string, 1001)})
	wantReason(t, "BatchGet of 1001 ids", err, codes.InvalidArgument, "")

	var listed []string
	token := ""
	for {
		resp, err := c.ListShards(ctx, &rolloutv1.ListShardsRequest{Prefix: "exp", PageSize: 1, PageToken: token, IncludeSummary: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetShards() {
			listed = append(listed, s.GetShard())
			if s.GetSummary().GetRecords() == 0 {
				t.Errorf("summary of %s: %v", s.GetShard(), s.GetSummary())
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if fmt.Sprint(listed) != "[exp/a exp/b]" {
		t.Fatalf("ListShards(exp) = %v, want [exp/a exp/b]", listed)
	}
	all, err := c.ListShards(ctx, &rolloutv1.ListShardsRequest{})
	if err != nil || len(all.GetShards()) != 4 || all.GetShards()[0].GetShard() != "exp-x" {
		t.Fatalf("ListShards() = %v, %v: want exp-x first of 4", all, err)
	}

	follow, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: "exp/a", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follow.Recv(); err != nil {
		t.Fatal(err)
	}

	stale := uint64(11)
	_, err = c.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: "exp/a", ExpectedLastSeq: &stale})
	wantReason(t, "DeleteShard with a stale expected_last_seq", err, codes.FailedPrecondition, ReasonSeqMismatch)
	if got := errorInfo(err).GetMetadata()[MetadataLastSeq]; got != "12" {
		t.Fatalf("SEQ_MISMATCH metadata last_seq = %q, want 12", got)
	}
	cur := uint64(12)
	del, err := c.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: "exp/a", ExpectedLastSeq: &cur})
	if err != nil || del.GetLastSeq() != 12 || del.GetRecords() != 12 || del.GetIncarnation() != 1 || del.GetAlreadyDeleted() {
		t.Fatalf("DeleteShard = %v, %v", del, err)
	}
	for {
		_, err := follow.Recv()
		if err != nil {
			wantReason(t, "following Scan across the delete", err, codes.NotFound, ReasonShardDeleted)
			break
		}
	}
	_, err = c.Get(ctx, &rolloutv1.GetRequest{Shard: "exp/a", Id: "b0-1"})
	wantReason(t, "Get of a deleted record", err, codes.NotFound, ReasonShardDeleted)
	_, err = c.DescribeShard(ctx, &rolloutv1.DescribeShardRequest{Shard: "exp/a"})
	wantReason(t, "DescribeShard of a deleted shard", err, codes.NotFound, ReasonShardDeleted)
	_, err = c.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: "exp/a", Ids: []string{"b0-1"}})
	wantReason(t, "BatchGet of a deleted shard", err, codes.NotFound, ReasonShardDeleted)
	scan, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: "exp/a"})
	if err == nil {
		_, err = scan.Recv()
	}
	wantReason(t, "Scan of a deleted shard", err, codes.NotFound, ReasonShardDeleted)
	sum, err := c.ListShards(ctx, &rolloutv1.ListShardsRequest{Prefix: "exp/a", IncludeSummary: true})
	if err != nil || len(sum.GetShards()) != 1 || !sum.GetShards()[0].GetSummary().GetDeleted() {
		t.Fatalf("ListShards of the deleted shard = %v, %v: want it listed as deleted", sum, err)
	}
	again, err := c.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: "exp/a"})
	if err != nil || !again.GetAlreadyDeleted() {
		t.Fatalf("second DeleteShard = %v, %v", again, err)
	}

	// The purger reclaims the deleted generations in the background;
	// no writer of the shard exists to do it (the next incarnation's
	// would delete them as orphans).
	deadline := time.Now().Add(10 * time.Second)
	for len(generationEpochs(t, store, "exp/a")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("generation blobs left 10s after the delete: epochs %v", generationEpochs(t, store, "exp/a"))
		}
		time.Sleep(5 * time.Millisecond)
	}

	resp, err := c.Append(ctx, appendReq("exp/a", "b0-1", "new"))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetResults(); r[0].GetSeq() != 13 || r[0].GetAlreadyPresent() || r[1].GetSeq() != 14 {
		t.Fatalf("Append after the delete = %v, want new records at 13 and 14", r)
	}
	info, err = c.DescribeShard(ctx, &rolloutv1.DescribeShardRequest{Shard: "exp/a"})
	if err != nil || info.GetIncarnation() != 1 || info.GetRecords() != 2 || info.GetFirstSeq() != 13 {
		t.Fatalf("DescribeShard of the next incarnation = %v, %v", info, err)
	}
	if _, err := c.Get(ctx, &rolloutv1.GetRequest{Shard: "exp/a", Id: "new"}); err != nil {
		t.Fatalf("Get of the next incarnation's record: %v", err)
	}
}

// Delete under load: two instances append to a shard while a third
// deletes it. Nothing acknowledged with a seq up to the tombstone's is
// readable afterwards; everything acknowledged above it is, and every
// append acknowledged after the delete returned has a seq above it; no
// call answers DATA_LOSS. (goleak in TestMain checks for leaks.)
func TestDeleteUnderLoad(t *testing.T) {
	store := memstore.New()
	a := startServer(t, Config{Store: store})
	b := startServer(t, Config{Store: store})
	d := startServer(t, Config{Store: store})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type ack struct {
		id        string
		seq       uint64
		afterDone bool // started after the DeleteShard returned
	}
	var (
		mu       sync.Mutex
		acks     []ack
		deleted  atomic.Bool
		stop     atomic.Bool
		dataLoss atomic.Int64
		n        atomic.Int64
		wg       sync.WaitGroup
	)
	for g := range 4 {
		c := []*testServer{a, b}[g%2].client
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", g, i)
				after := deleted.Load()
				r, err := appendOne(ctx, c, "load", id)
				if status.Code(err) == codes.DataLoss {
					dataLoss.Add(1)
				}
				if err != nil {
					continue // fenced past its retries, or outcome unknown: not acknowledged
				}
				mu.Lock()
				acks = append(acks, ack{id, r.GetSeq(), after})
				mu.Unlock()
				n.Add(1)
			}
		})
	}
	for n.Load() < 60 {
		time.Sleep(time.Millisecond)
	}
	del, err := d.client.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: "load"})
	if err != nil {
		t.Fatal(err)
	}
	deleted.Store(true)
	at := n.Load()
	for n.Load() < at+60 {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	tomb := del.GetLastSeq()
	var before, after int
	for _, k := range acks {
		_, err := d.client.Get(ctx, &rolloutv1.GetRequest{Shard: "load", Id: k.id})
		switch {
		case status.Code(err) == codes.DataLoss:
			dataLoss.Add(1)
		case k.seq <= tomb:
			before++
			if status.Code(err) != codes.NotFound {
				t.Errorf("%s, acked at seq %d before the tombstone (%d): Get = %v, want NotFound", k.id, k.seq, tomb, err)
			}
		default:
			after++
			if err != nil {
				t.Errorf("%s, acked at seq %d after the tombstone (%d): Get = %v", k.id, k.seq, tomb, err)
			}
		}
		if k.afterDone && k.seq <= tomb {
			t.Errorf("%s, appended after the delete returned, acked at seq %d, not above the tombstone's %d", k.id, k.seq, tomb)
		}
	}
	if dataLoss.Load() != 0 {
		t.Errorf("%d calls answered DATA_LOSS", dataLoss.Load())
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d acks before the tombstone, %d after: the test proved nothing", before, after)
	}
	sc, err := d.client.Scan(ctx, &rolloutv1.ScanRequest{Shard: "load"})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		resp, err := sc.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetRecords() {
			seqs = append(seqs, r.GetSeq())
		}
	}
	if len(seqs) != after || !sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] < seqs[j] }) || (len(seqs) > 0 && seqs[0] <= tomb) {
		t.Errorf("Scan after the delete: %d records from seq %v, want the %d acked above %d", len(seqs), seqs[:min(1, len(seqs))], after, tomb)
	}
	t.Logf("delete under load: tombstone at seq %d; %d acks before it (all gone), %d after (all readable)", tomb, before, after)
}

const lifecyclePolicy = `
grants:
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a, team-b/shared]
    verbs: [append, get, list, describe]
  - identities: [reader.team-b.test]
    shardPrefixes: [team-b]
    verbs: [append, get]
  - identities: ["cn:cn-admin"]
    shardPrefixes: [team-a/old]
    verbs: [delete]
`

// Each lifecycle verb denied and allowed over mTLS, and ListShards
// filtered to the prefixes the caller may list.
func TestLifecycleAuthorization(t *testing.T) {
	as := startAuthz(t, lifecyclePolicy)
	trainer, reader, admin := as.clients[idTrainer], as.clients[idReader], as.clients[idAdmin]
	for _, s := range []string{"team-a/x", "team-a/old"} {
		if _, err := trainer.Append(rpcCtx(t), appendReq(s, "r-1")); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"team-b/shared", "team-b/private"} {
		if _, err := reader.Append(rpcCtx(t), appendReq(s, "r-1")); err != nil {
			t.Fatal(err)
		}
	}

	var listed []string
	for token := ""; ; {
		resp, err := trainer.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range resp.GetShards() {
			listed = append(listed, s.GetShard())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if fmt.Sprint(listed) != "[team-a/old team-a/x team-b/shared]" {
		t.Fatalf("the trainer lists %v, want its list grants' shards only", listed)
	}
	_, err := reader.ListShards(rpcCtx(t), &rolloutv1.ListShardsRequest{})
	wantReason(t, "ListShards without a list grant", err, codes.PermissionDenied, "")

	if _, err := trainer.DescribeShard(rpcCtx(t), &rolloutv1.DescribeShardRequest{Shard: "team-a/x"}); err != nil {
		t.Fatalf("describe under its grant: %v", err)
	}
	_, err = trainer.DescribeShard(rpcCtx(t), &rolloutv1.DescribeShardRequest{Shard: "team-b/private"})
	wantReason(t, "describe outside its grant", err, codes.PermissionDenied, "")
	_, err = reader.DescribeShard(rpcCtx(t), &rolloutv1.DescribeShardRequest{Shard: "team-b/private"})
	wantReason(t, "describe without the verb", err, codes.PermissionDenied, "")

	if _, err := reader.BatchGet(rpcCtx(t), &rolloutv1.BatchGetRequest{Shard: "team-b/private", Ids: []string{"r-1"}}); err != nil {
		t.Fatalf("BatchGet under a get grant: %v", err)
	}
	_, err = reader.BatchGet(rpcCtx(t), &rolloutv1.BatchGetRequest{Shard: "team-a/x", Ids: []string{"r-1"}})
	wantReason(t, "BatchGet outside the get grant", err, codes.PermissionDenied, "")

	// Every other verb on team-a does not imply delete.
	_, err = trainer.DeleteShard(rpcCtx(t), &rolloutv1.DeleteShardRequest{Shard: "team-a/x"})
	wantReason(t, "delete by the trainer", err, codes.PermissionDenied, "")
	_, err = admin.DeleteShard(rpcCtx(t), &rolloutv1.DeleteShardRequest{Shard: "team-a/x"})
	wantReason(t, "delete outside the delete grant", err, codes.PermissionDenied, "")
	if _, err := admin.DeleteShard(rpcCtx(t), &rolloutv1.DeleteShardRequest{Shard: "team-a/old"}); err != nil {
		t.Fatalf("delete under its grant: %v", err)
	}
	_, err = trainer.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "team-a/old", Id: "r-1"})
	wantReason(t, "Get after the granted delete", err, codes.NotFound, ReasonShardDeleted)
	if _, err := trainer.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "team-a/x", Id: "r-1"}); err != nil {
		t.Fatalf("the refused delete deleted: %v", err)
	}
}
