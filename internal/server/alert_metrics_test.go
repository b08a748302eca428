package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// The series the alert rules (deploy/k8s/monitoring) query exist at 0
// before anything happened, so that increase() sees the first event.
func TestAlertSeriesExportedAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics()
	reg.MustRegister(m.collectors...)
	want := map[string]bool{}
	for _, r := range []string{rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), rolloutv1.ErrorReason_NOT_COMMITTED.String(), rolloutv1.ErrorReason_BACKPRESSURE.String(), rolloutv1.ErrorReason_RATE_LIMITED.String(), rolloutv1.ErrorReason_TOO_LARGE.String()} {
		want[fmt.Sprintf(`rolloutd_rpc_error_reasons_total{method="Append",reason=%q}`, r)] = true
	}
	want[`rolloutd_rpc_error_reasons_total{method="Scan",reason="SCAN_INTERRUPTED"}`] = true
	want[`rolloutd_shutdown_timeouts_total{stage="rpcs"}`] = true
	want[`rolloutd_shutdown_timeouts_total{stage="writers"}`] = true
	reg.MustRegister(newGuard(Config{}, nil).collectors()...)
	for _, v := range []string{"append", "get", "scan"} {
		want[fmt.Sprintf(`rolloutd_rpc_denied_total{verb=%q}`, v)] = true
		want[fmt.Sprintf(`rolloutd_streams_revoked_total{verb=%q}`, v)] = true
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			name := mf.GetName() + "{"
			for i, l := range s.GetLabel() {
				if i > 0 {
					name += ","
				}
				name += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
			}
			name += "}"
			if want[name] && s.GetCounter().GetValue() == 0 {
				delete(want, name)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("not exported at 0: %v", want)
	}
}

// An answered error is counted under its ErrorInfo reason; errors without
// one are not counted.
func TestErrorReasonsCounted(t *testing.T) {
	m := NewMetrics()
	for _, tc := range []struct {
		method, reason string
		err            error
	}{
		{"Append", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), appendStatus(context.Background(), fmt.Errorf("commit: %w", shard.ErrOutcomeUnknown))},
		{"Append", rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), appendStatus(context.Background(), fmt.Errorf("put: %w", blob.ErrOutcomeUnknown))}, // withheld from the client, same reason
		{"Append", rolloutv1.ErrorReason_NOT_COMMITTED.String(), appendStatus(context.Background(), shard.ErrFenced)},
		{"Append", rolloutv1.ErrorReason_STORE_FULL.String(), appendStatus(context.Background(), fmt.Errorf("put: %w", blob.ErrNoSpace))}, // withheld from the client, same reason
		{"Scan", rolloutv1.ErrorReason_SCAN_INTERRUPTED.String(), failure{code: codes.Unavailable, msg: "scan ended"}.resumeAt(3).err()},
		{"Subscribe", rolloutv1.ErrorReason_SCAN_INTERRUPTED.String(), failure{code: codes.Unavailable, msg: "subscription ended"}.interrupted().err()},
	} {
		before := testutil.ToFloat64(m.errorReasons.WithLabelValues(tc.method, tc.reason))
		err := tc.err
		if ie, ok := err.(*internalError); ok {
			err = ie.f.status("req").Err()
		}
		m.observeErrorReason(tc.method, err)
		if got := testutil.ToFloat64(m.errorReasons.WithLabelValues(tc.method, tc.reason)); got != before+1 {
			t.Errorf("%s %v: %s counted %v times, want %v", tc.method, tc.err, tc.reason, got, before+1)
		}
	}
	m.observeErrorReason("Get", toStatus(context.Background(), blob.ErrNotFound))
	m.observeErrorReason("Append", nil)
	if n := testutil.CollectAndCount(m.errorReasons); n != 8 {
		t.Errorf("%d reason series, want the 8 exported at start: errors without a reason were counted", n)
	}
}

// A shutdown whose budget ends with an Append's commit stuck in storage
// counts both stages that ran out of time: the RPCs cancelled and the
// writer aborted.
func TestShutdownTimeoutsCounted(t *testing.T) {
	store, gate := holdGenerations()
	defer gate.Release()
	ts := startServer(t, Config{Store: store})
	done := make(chan error, 1)
	go func() {
		_, err := ts.client.Append(rpcCtx(t), &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a")}})
		done <- err
	}()
	select {
	case <-gate.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the append's commit never reached storage")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ts.Shutdown(ctx)
	<-done
	for _, stage := range []string{shutdownStageRPCs, shutdownStageWriters} {
		if got := testutil.ToFloat64(ts.metrics.shutdownTimeouts.WithLabelValues(stage)); got != 1 {
			t.Errorf("rolloutd_shutdown_timeouts_total{stage=%q} = %v, want 1", stage, got)
		}
	}
}
