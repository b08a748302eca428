package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// A partition of a shard's log longer than CommitTimeout leaves a create in
// doubt, which stops the shard's writer with a lasting error that is none
// of fenced, stale, aborted or closed. The writer set must replace it all
// the same, backing off while the partition lasts; once the store heals,
// the shard serves again on the same set, the replacement fences (the doubt
// travels through the Lineage), and the doubtful append's retry settles it.
func TestUndecidedCreateDoesNotWedgeTheShard(t *testing.T) {
	const commitTimeout = 200 * time.Millisecond
	fs := faultstore.New(memstore.New(), 1)
	var logFences atomic.Int64
	opts := testWriterOptions(t)
	opts.CommitTimeout = commitTimeout
	opts.Lineage = shard.NewLineage()
	opts.OnFence = func() { logFences.Add(1) }
	co := &countingOpen{store: fs, opts: opts}
	svc := newTestService(t, fs, 8, co.open)
	ws := svc.writers
	ctx := t.Context()
	l := newLedger()
	appendIDs := func(ctx context.Context, ids ...string) error {
		rs, err := ws.append(ctx, "s", entries(t, ids...))
		if err == nil {
			l.add(t, "s", ids, seqsOf(rs))
		}
		return err
	}
	if err := appendIDs(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	heal := fs.Partition(format.LogPrefix("s"), false)
	cut := time.Now()
	opensBefore := co.n.Load()
	var doubtful []string // answered OUTCOME_UNKNOWN: settled by a retry after the heal
	var notCommitted []string
	var mu sync.Mutex
	classifyAnswer := func(id string, err error, took, deadline time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if took > deadline+100*time.Millisecond {
			t.Errorf("append %s answered after %v, past its deadline of %v", id, took, deadline)
		}
		switch {
		case err == nil:
		case errors.Is(err, shard.ErrOutcomeUnknown):
			doubtful = append(doubtful, id)
		default:
			notCommitted = append(notCommitted, id)
		}
	}
	// A lone append, so that no other append queued behind it fails as
	// stale and retires the writer on its own.
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := appendIDs(bctx, "b")
	cancel()
	classifyAnswer("b", err, time.Since(start), 5*time.Second)
	if !errors.Is(err, shard.ErrOutcomeUnknown) {
		t.Errorf("the append whose create the partition left in doubt: %v, want ErrOutcomeUnknown", err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; time.Since(cut) < 2*commitTimeout; i++ {
				id := fmt.Sprintf("p%d-%d", g, i)
				actx, cancel := context.WithTimeout(ctx, time.Second)
				start := time.Now()
				err := appendIDs(actx, id)
				cancel()
				classifyAnswer(id, err, time.Since(start), time.Second)
			}
		})
	}
	wg.Wait()
	heal()
	healed := time.Now()
	opens := co.n.Load() - opensBefore
	t.Logf("%v partition: %d opens, %d NOT_COMMITTED, %d in doubt; %v open backoffs",
		healed.Sub(cut).Round(time.Millisecond), opens, len(notCommitted), len(doubtful), testutil.ToFloat64(ws.metrics.openBackoffs))
	if opens > 20 {
		t.Errorf("%d writer opens during a %v partition: replacement does not back off", opens, healed.Sub(cut).Round(time.Millisecond))
	}

	// New appends succeed on the same set soon after the heal.
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := appendIDs(actx, "c")
		cancel()
		if err == nil {
			break
		}
		if time.Since(healed) > 5*time.Second {
			t.Fatalf("append still failing %v after the heal: %v", time.Since(healed).Round(time.Millisecond), err)
		}
	}
	t.Logf("first append after the heal acked %v after it", time.Since(healed).Round(time.Millisecond))
	if logFences.Load() == 0 {
		t.Error("no replacement fenced the log after a writer stopped with a create in doubt")
	}
	// The doubtful appends' retries settle them.
	for _, id := range doubtful {
		if err := appendIDs(ctx, id); err != nil {
			t.Errorf("retry of %s after the heal: %v", id, err)
		}
	}
	// Nothing answered NOT_COMMITTED is stored.
	for _, id := range notCommitted {
		if _, err := svc.reader.Get(ctx, "s", id); !errors.Is(err, shard.ErrRecordNotFound) {
			t.Errorf("%s was answered NOT_COMMITTED; Get: %v", id, err)
		}
	}
	l.verify(t, fs.Inner())
}

// The backoff of failed opens forgets shards no request came back for, so
// that a stream of shards each written once during an outage cannot grow it
// without bound; a shard still backing off is kept.
func TestOpenBackoffForgetsShardsLeftAlone(t *testing.T) {
	svc := newTestService(t, memstore.New(), 8, (&countingOpen{store: memstore.New(), opts: testWriterOptions(t)}).open)
	ws := svc.writers
	ws.mu.Lock()
	defer ws.mu.Unlock()
	long := time.Now().Add(-2 * forgetFailedOpen)
	for i := range maxFailingShards {
		ws.failing[fmt.Sprintf("old-%d", i)] = &reopen{fails: 3, at: long}
	}
	ws.failing["recent"] = &reopen{fails: 3, at: time.Now()}
	ws.openFailedLocked("new", errors.New("unavailable"))
	if len(ws.failing) != 2 || ws.failing["recent"] == nil || ws.failing["new"] == nil {
		t.Fatalf("after a failed open with %d old entries: %d entries, want only the recent one and the new one", maxFailingShards, len(ws.failing))
	}
}
