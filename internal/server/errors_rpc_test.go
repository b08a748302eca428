package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// A request too big in itself is TOO_LARGE with a BadRequest naming the
// field, records[i] for a record and records for the batch, and never a
// RetryInfo: waiting does not make it fit.
func TestAppendTooLargeNamesTheField(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New(), MaxBatchRecords: 4, MaxRecordBytes: 200})
	big := record("big")
	big.Content = strings.Repeat("x", 300)
	tests := []struct {
		name    string
		records []*rolloutv1.Record
		field   string
	}{
		{"record over the limit", []*rolloutv1.Record{record("a"), record("b"), record("c"), big}, "records[3]"},
		{"batch over the record count", []*rolloutv1.Record{record("a"), record("b"), record("c"), record("d"), record("e")}, "records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ts.client.Append(rpcCtx(t), &rolloutv1.AppendRequest{Shard: "s", Records: tt.records})
			st := status.Convert(err)
			d := detailsOf(t, st)
			if st.Code() != codes.ResourceExhausted || d.reason(t) != rolloutv1.ErrorReason_TOO_LARGE.String() || d.badField(t) != tt.field || d.retry != nil {
				t.Errorf("got %v %v, want ResourceExhausted TOO_LARGE naming %q, without RetryInfo", st, st.Details(), tt.field)
			}
		})
	}
}

// holdGenerations returns a store that holds every generation put of shard
// "s" at the gate until it is released.
func holdGenerations() (*faultstore.Store, *faultstore.Gate) {
	s := faultstore.New(memstore.New(), 1)
	return s, s.Hold(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut},
		If: func(c faultstore.Call) bool { return format.IsDataBlob("s", c.Name) }})
}

// An append that finds its shard's writer at its cap of queued bytes is
// BACKPRESSURE with a RetryInfo, and stores nothing.
func TestAppendBackpressureCarriesRetryInfo(t *testing.T) {
	store, gate := holdGenerations()
	opts := testWriterOptions(t)
	opts.MaxQueuedBytes = 1 // the commit in flight fills the queue
	ts := startServer(t, Config{Store: store, Writer: opts})

	first := make(chan error, 1)
	go func() {
		_, err := ts.client.Append(rpcCtx(t), &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a")}})
		first <- err
	}()
	select {
	case <-gate.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the first append's commit never reached storage")
	}
	_, err := ts.client.Append(rpcCtx(t), &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("b")}})
	gate.Release()
	st := status.Convert(err)
	d := detailsOf(t, st)
	if st.Code() != codes.ResourceExhausted || d.reason(t) != rolloutv1.ErrorReason_BACKPRESSURE.String() || d.retry.GetRetryDelay().AsDuration() != backpressureRetry || d.bad != nil {
		t.Errorf("got %v %v, want ResourceExhausted BACKPRESSURE with a RetryInfo of %v", st, st.Details(), backpressureRetry)
	}
	if got := testutil.ToFloat64(ts.metrics.errorReasons.WithLabelValues("Append", rolloutv1.ErrorReason_BACKPRESSURE.String())); got != 1 {
		t.Errorf(`rolloutd_rpc_error_reasons_total{method="Append",reason="BACKPRESSURE"} = %v, want 1`, got)
	}
	if err := <-first; err != nil {
		t.Fatalf("the first append: %v", err)
	}
	if _, err := ts.client.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "s", Id: "b"}); status.Code(err) != codes.NotFound {
		t.Errorf("the refused record: %v, want NotFound", err)
	}
}

// A Scan that storage cuts off names its cursor in ErrorInfo metadata, not
// only in the text; a Get that storage cuts off says nothing of a write.
func TestStorageErrorOnReadDetails(t *testing.T) {
	ts := startServer(t, Config{Store: getsDo(getFails(blob.ErrUnavailable))})
	stream, err := ts.client.Scan(rpcCtx(t), &rolloutv1.ScanRequest{Shard: "s", AfterSeq: 7})
	if err == nil {
		_, err = stream.Recv()
	}
	st := status.Convert(err)
	d := detailsOf(t, st)
	if st.Code() != codes.Unavailable || d.reason(t) != rolloutv1.ErrorReason_SCAN_INTERRUPTED.String() || d.info.GetMetadata()[MetadataResumeAfterSeq] != "7" {
		t.Errorf("Scan: %v %v, want Unavailable SCAN_INTERRUPTED with %s=7", st, st.Details(), MetadataResumeAfterSeq)
	}
	_, err = ts.client.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "s", Id: "a"})
	if st := status.Convert(err); st.Code() != codes.Unavailable || len(st.Details()) != 0 {
		t.Errorf("Get: %v %v, want Unavailable without details", st, st.Details())
	}
}

// An Append whose deadline ends before anything was sent (here: while its
// writer is still opening) is NOT_COMMITTED, with the deadline's code.
func TestAppendNotSentIsNotCommitted(t *testing.T) {
	ts := startServer(t, Config{Store: getsDo(getBlocks), DefaultDeadline: 50 * time.Millisecond})
	_, err := ts.client.Append(context.Background(), &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a")}})
	st := status.Convert(err)
	d := detailsOf(t, st)
	if st.Code() != codes.DeadlineExceeded || d.reason(t) != rolloutv1.ErrorReason_NOT_COMMITTED.String() || d.retry != nil {
		t.Errorf("got %v %v, want DeadlineExceeded NOT_COMMITTED without RetryInfo", st, st.Details())
	}
}
