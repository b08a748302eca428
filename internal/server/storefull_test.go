package server

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/blob/localstore/vfs"
)

// TestStoreFullIsSaidAtOnce fills the local store's disk (ENOSPC injected
// at write, as a tmpfs fails, then at fsync, as ext4 may), through the
// gRPC API: an Append to a shard with a writer and one to a new shard are
// both answered RESOURCE_EXHAUSTED with reason STORE_FULL within a second,
// counted, while reads go on; once space returns the same appends succeed
// with no restart, and every acknowledged record reads back.
func TestStoreFullIsSaidAtOnce(t *testing.T) {
	fsys := vfs.NewFaulty(vfs.Default)
	store, err := localstore.Open(t.TempDir(), localstore.WithFS(fsys))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ts := startServer(t, Config{Store: store})
	acked := map[string][]string{}
	appendOK := func(shard string, ids ...string) {
		t.Helper()
		recs := make([]*rolloutv1.Record, len(ids))
		for i, id := range ids {
			recs[i] = record(id)
		}
		if _, err := ts.client.Append(rpcCtx(t), &rolloutv1.AppendRequest{Shard: shard, Records: recs}); err != nil {
			t.Fatalf("Append(%s, %v): %v", shard, ids, err)
		}
		acked[shard] = append(acked[shard], ids...)
	}
	appendOK("full/a", "a1")

	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync} {
		fsys.FailUnder(op, syscall.ENOSPC, "/tmp/")
		for _, shard := range []string{"full/a", "full/new-" + string(op)} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			_, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: shard, Records: []*rolloutv1.Record{record("while-full")}})
			took := time.Since(start)
			cancel()
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted || reasonOf(st) != rolloutv1.ErrorReason_STORE_FULL.String() {
				t.Fatalf("full at %s: Append(%s) = %v (reason %q); want RESOURCE_EXHAUSTED, STORE_FULL", op, shard, err, reasonOf(st))
			}
			if took > time.Second {
				t.Fatalf("full at %s: Append(%s) answered after %v; want within 1 s", op, shard, took)
			}
		}
		// Reads go on.
		if _, err := ts.client.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "full/a", Id: "a1"}); err != nil {
			t.Fatalf("Get while full at %s: %v", op, err)
		}
		// Space returns: no restart.
		fsys.Clear()
		appendOK("full/a", "after-"+string(op))
		appendOK("full/new-"+string(op), "while-full")
	}
	if store.Failed() != nil {
		t.Fatalf("the store failed: %v", store.Failed())
	}
	if got := testutil.ToFloat64(ts.metrics.errorReasons.WithLabelValues("Append", rolloutv1.ErrorReason_STORE_FULL.String())); got != 4 {
		t.Errorf("rolloutd_rpc_error_reasons_total{reason=STORE_FULL} = %v, want 4", got)
	}
	for shard, ids := range acked {
		for _, id := range ids {
			if _, err := ts.client.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: shard, Id: id}); err != nil {
				t.Errorf("Get(%s, %s) of an acknowledged record: %v", shard, id, err)
			}
		}
	}
}

func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
