package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// BenchmarkSlowConsumer compares append latency on a shard with and without
// follow streams on it whose clients never read, in the same run. The
// stalled streams fill their flow-control windows and block in Send; appends
// must not notice.
//
//	go test -run '^$' -bench SlowConsumer -benchtime 300x ./internal/server
func BenchmarkSlowConsumer(b *testing.B) {
	ts := startServer(b, Config{Store: memstore.New(), Logger: zap.NewNop(), Writer: shard.Options{Logger: zap.NewNop()}})
	ctx := context.Background()
	payload := strings.Repeat("x", 4096)
	n := 0
	appendOne := func(shardName string) time.Duration {
		n++
		r := record(fmt.Sprint("id-", n))
		r.Content = payload
		start := time.Now()
		if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: shardName, Records: []*rolloutv1.Record{r}}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// Two shards alike, each with enough records to fill a stalled stream's
	// flow-control windows; only "stalled" gets streams that never read.
	for range 2000 {
		appendOne("quiet")
		appendOne("stalled")
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range 4 {
		if _, err := ts.client.Scan(sctx, &rolloutv1.ScanRequest{Shard: "stalled", Follow: true}); err != nil {
			b.Fatal(err)
		}
	}
	var quiet, stalled []time.Duration
	for b.Loop() {
		// Alternate, so both see the same machine noise.
		quiet = append(quiet, appendOne("quiet"))
		stalled = append(stalled, appendOne("stalled"))
	}
	slices.Sort(quiet)
	slices.Sort(stalled)
	b.ReportMetric(float64(stalled[len(stalled)/2])/float64(quiet[len(quiet)/2]), "stalled/quiet-p50")
}
