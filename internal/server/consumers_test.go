package server

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/consumer"
)

func TestConsumerRPCs(t *testing.T) {
	store := memstore.New()
	reg := prometheus.NewRegistry()
	ts := startServer(t, Config{Store: store, Registerer: reg})
	c, ctx := ts.client, context.Background()
	for i, sh := range []string{"exp/a", "exp/a", "exp/a", "exp/b", "exp/b", "other/x"} {
		if _, err := c.Append(ctx, &rolloutv1.AppendRequest{Shard: sh, Records: []*rolloutv1.Record{record(fmt.Sprintf("r-%d", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	// exp/a has seqs 1..3, exp/b 1..2.
	if _, err := c.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "exp", Consumer: "t"}); status.Code(err) != codes.NotFound {
		t.Fatalf("describe before any commit: %v, want NotFound", err)
	}
	resp, err := c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"exp/a": 2}})
	if err != nil || resp.GetGeneration() != 1 {
		t.Fatalf("commit: %v, %v", resp, err)
	}
	// A lower cursor keeps the stored one.
	if _, err := c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"exp/a": 1}, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	info, err := c.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "exp", Consumer: "t", IncludePositions: true})
	if err != nil {
		t.Fatal(err)
	}
	// Lag: exp/a 3-2 = 1, exp/b has no position: 2. other/x is not under exp.
	if !maps.Equal(info.GetPositions(), map[string]uint64{"exp/a": 2}) || info.GetLagRecords() != 3 || info.GetLaggingShards() != 2 ||
		info.GetShards() != 1 || info.GetGeneration() != 1 || info.GetCreatedAt() == nil {
		t.Fatalf("describe: %v", info)
	}
	if got := testutil.ToFloat64(ts.metrics.consumers.lag.WithLabelValues("exp:t")); got != 3 {
		t.Errorf("rolloutd_consumer_lag_records{consumer=\"exp:t\"} = %v, want 3", got)
	}
	// A commit after the describe updates the lag from the tails it read.
	if _, err := c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"exp/b": 2}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(ts.metrics.consumers.lag.WithLabelValues("exp:t")); got != 1 {
		t.Errorf("lag after a commit = %v, want 1", got)
	}
	if got := testutil.ToFloat64(ts.metrics.consumers.commits.WithLabelValues("exp:t")); got != 3 {
		t.Errorf("rolloutd_consumer_commits_total{consumer=\"exp:t\"} = %v, want 3", got)
	}

	// Reset to LATEST: every shard under the prefix at its last seq.
	rr, err := c.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_LATEST})
	if err != nil || rr.GetConsumer().GetGeneration() != 2 || !maps.Equal(rr.GetConsumer().GetPositions(), map[string]uint64{"exp/a": 3, "exp/b": 2}) {
		t.Fatalf("reset to latest: %v, %v", rr, err)
	}
	// A commit for generation 1 is refused with CONSUMER_RESET and the
	// generation.
	_, err = c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"exp/a": 1}, Generation: 1})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || reasonOf(st) != "CONSUMER_RESET" || metadataOf(st)["generation"] != "2" {
		t.Fatalf("stale commit: %v (details %v), want FAILED_PRECONDITION CONSUMER_RESET generation 2", err, st.Details())
	}
	// Reset to EARLIEST, and to exact positions.
	rr, err = c.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST})
	if err != nil || rr.GetConsumer().GetGeneration() != 3 || len(rr.GetConsumer().GetPositions()) != 0 {
		t.Fatalf("reset to earliest: %v, %v", rr, err)
	}
	rr, err = c.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"exp/b": 1}})
	if err != nil || rr.GetConsumer().GetGeneration() != 4 || !maps.Equal(rr.GetConsumer().GetPositions(), map[string]uint64{"exp/b": 1}) {
		t.Fatalf("reset to positions: %v, %v", rr, err)
	}

	// List: without positions, only under the prefix.
	if _, err := c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "other", Consumer: "t"}); err != nil {
		t.Fatal(err)
	}
	lr, err := c.ListConsumers(ctx, &rolloutv1.ListConsumersRequest{Prefix: "exp"})
	if err != nil || len(lr.GetConsumers()) != 1 || lr.GetConsumers()[0].GetConsumer() != "t" || lr.GetConsumers()[0].GetPositions() != nil || lr.GetConsumers()[0].GetShards() != 1 {
		t.Fatalf("list: %v, %v", lr, err)
	}
	if lr, err := c.ListConsumers(ctx, &rolloutv1.ListConsumersRequest{}); err != nil || len(lr.GetConsumers()) != 2 {
		t.Fatalf("list all: %v, %v", lr, err)
	}

	// Consumers are not shards: ListShards does not see them.
	ls, err := c.ListShards(ctx, &rolloutv1.ListShardsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ls.GetShards() {
		if strings.Contains(s.GetShard(), "consumer") {
			t.Errorf("ListShards lists %q", s.GetShard())
		}
	}

	if _, err := c.DeleteConsumer(ctx, &rolloutv1.DeleteConsumerRequest{Prefix: "exp", Consumer: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteConsumer(ctx, &rolloutv1.DeleteConsumerRequest{Prefix: "exp", Consumer: "t"}); status.Code(err) != codes.NotFound {
		t.Fatalf("second delete: %v, want NotFound", err)
	}
}

func TestConsumerRPCsReject(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	c, ctx := ts.client, context.Background()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"bad name", func() error {
			_, err := c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "Bad"})
			return err
		}},
		{"bad prefix", func() error {
			_, err := c.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "../x", Consumer: "t"})
			return err
		}},
		{"shard outside the prefix", func() error {
			_, err := c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"expx/a": 1}})
			return err
		}},
		{"reset without to or positions", func() error {
			_, err := c.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t"})
			return err
		}},
		{"reset with to and positions", func() error {
			_, err := c.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST, Positions: map[string]uint64{"exp/a": 1}})
			return err
		}},
		{"reset to consumer", func() error {
			_, err := c.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_CONSUMER})
			return err
		}},
		{"bad page token", func() error {
			_, err := c.ListConsumers(ctx, &rolloutv1.ListConsumersRequest{PageToken: "nope"})
			return err
		}},
	} {
		if code := status.Code(tc.call()); code != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", tc.name, code)
		}
	}
}

// The consumer series are bounded: the least recently used consumer's
// are dropped, and counted.
func TestConsumerMetricsBounded(t *testing.T) {
	m := newConsumerMetrics()
	m.max = 3
	for i := range 5 {
		m.committed(fmt.Sprintf("p:c%d", i))
	}
	m.setLag("p:c2", 7, nil) // c2 is used again: c3 becomes the oldest
	m.committed("p:c5")
	if n := testutil.CollectAndCount(m.commits); n != 3 {
		t.Errorf("%d commits series, want 3", n)
	}
	if got := testutil.ToFloat64(m.dropped); got != 3 {
		t.Errorf("dropped %v, want 3", got)
	}
	for _, l := range []string{"p:c2", "p:c4", "p:c5"} {
		if _, ok := m.used[l]; !ok {
			t.Errorf("%s dropped; kept %v", l, m.used)
		}
	}
	m.forget("p:c2")
	if n := testutil.CollectAndCount(m.lag); n != 0 {
		t.Errorf("%d lag series after forgetting the only one", n)
	}
}

func metadataOf(st *status.Status) map[string]string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetMetadata()
		}
	}
	return nil
}

// knownTails is a tailKnower that knows some shards' tails, as the
// subscriptions' shared readers will.
type knownTails map[string]uint64

func (k knownTails) LastSeq(shard string) (uint64, bool) { last, ok := k[shard]; return last, ok }

// The lag takes the tails the tailKnower knows, and reads the manifests of
// the other shards only; so does a reset to LATEST.
func TestConsumerLagUsesKnownTails(t *testing.T) {
	store := faultstore.New(memstore.New(), 1)
	svc := newTestService(t, store, 4, (&countingOpen{store: store, opts: testWriterOptions(t)}).open)
	svc.life = lifecycle{store: store, log: zaptest.NewLogger(t)}
	svc.cons = consumers{store: consumer.New(store, consumer.Options{}), tails: knownTails{"exp/a": 10}}
	ctx := context.Background()
	for _, sh := range []string{"exp/a", "exp/b"} {
		if _, err := svc.writers.append(ctx, sh, entries(t, "r1", "r2")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "exp", Consumer: "t", Positions: map[string]uint64{"exp/a": 4}}); err != nil {
		t.Fatal(err)
	}
	manifests := store.Count(faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: "shards/exp/a/"})
	info, err := svc.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "exp", Consumer: "t"})
	// exp/a: known tail 10 - 4; exp/b: 2 from its manifest.
	if err != nil || info.GetLagRecords() != 8 || info.GetLaggingShards() != 2 {
		t.Fatalf("describe: %v, %v; want lag 8 over 2 shards", info, err)
	}
	if n := manifests.N(); n != 0 {
		t.Errorf("describe read exp/a's manifest %d times; its tail is known", n)
	}
	rr, err := svc.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "exp", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_LATEST})
	if err != nil || !maps.Equal(rr.GetConsumer().GetPositions(), map[string]uint64{"exp/a": 10, "exp/b": 2}) {
		t.Fatalf("reset to latest: %v, %v", rr, err)
	}
}
