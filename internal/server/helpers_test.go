package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard"
	shardfollow "github.com/rolloutd/rolloutd/internal/shard/follow"
)

// testWriterOptions keep retries fast and background work quiet.
func testWriterOptions(t testing.TB) shard.Options {
	return shard.Options{Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond}
}

// countingOpen opens real writers on store and counts the opens.
type countingOpen struct {
	store blob.Store
	opts  shard.Options
	n     atomic.Int64
}

func (o *countingOpen) open(ctx context.Context, shardName string) (*shard.Writer, error) {
	o.n.Add(1)
	return shard.Open(ctx, o.store, shardName, o.opts)
}

// newTestService returns a service over a writer set of maxWriters writers
// opened by open, and closes the set when the test ends.
func newTestService(t testing.TB, store blob.Store, maxWriters int, open openFunc) *service {
	t.Helper()
	m := NewMetrics()
	log := zaptest.NewLogger(t)
	ws := newWriterSet(maxWriters, open, 10*time.Second, appendRetry{DefaultAppendAttempts, time.Millisecond}, log, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ws.closeAll(ctx)
	})
	reader := shard.NewReader(store, shard.ReaderOptions{Logger: log})
	fs := shardfollow.NewSet(reader, shardfollow.Options{Logger: log})
	t.Cleanup(fs.Close)
	return &service{
		writers:         ws,
		reader:          reader,
		follow:          fs,
		clock:           clock.Real{},
		metrics:         m,
		maxBatchRecords: DefaultMaxBatchRecords,
		maxRecordBytes:  DefaultMaxRecordBytes,
	}
}

func record(id string) *rolloutv1.Record {
	return &rolloutv1.Record{Id: id, RolloutId: "r-" + id, Content: "content of " + id, OutputTokens: []int32{1, 2, 3}, LossMask: []byte{1, 0, 1}}
}

func entries(t testing.TB, ids ...string) []shard.Entry {
	t.Helper()
	out := make([]shard.Entry, len(ids))
	for i, id := range ids {
		e, err := shard.Prepare(record(id), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = e
	}
	return out
}

// ledger records acknowledged appends, to check afterwards that each is
// readable, exactly once.
type ledger struct {
	mu   sync.Mutex
	acks map[string]map[string]uint64 // shard → id → seq
}

func newLedger() *ledger { return &ledger{acks: map[string]map[string]uint64{}} }

func (l *ledger) add(t testing.TB, shardName string, ids []string, seqs []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.acks[shardName]
	if m == nil {
		m = map[string]uint64{}
		l.acks[shardName] = m
	}
	for i, id := range ids {
		if _, dup := m[id]; dup {
			t.Errorf("shard %q: id %q acked twice", shardName, id)
		}
		m[id] = seqs[i]
	}
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.acks {
		n += len(m)
	}
	return n
}

// verify checks that every acked record reads back with its acked seq and
// content, and that each shard holds exactly the acked records: none lost,
// none duplicated.
func (l *ledger) verify(t testing.TB, store blob.Store) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	r := shard.NewReader(store, shard.ReaderOptions{})
	ctx := context.Background()
	for shardName, ids := range l.acks {
		m, err := r.Manifest(ctx, shardName)
		if err != nil {
			t.Fatalf("shard %q: %v", shardName, err)
		}
		if got := m.GetRecordCount(); got != uint64(len(ids)) {
			t.Errorf("shard %q holds %d records, %d were acked", shardName, got, len(ids))
		}
		seqs := map[uint64]string{}
		for id, seq := range ids {
			rec, err := r.Get(ctx, shardName, id)
			if err != nil {
				t.Errorf("shard %q: acked id %q: %v", shardName, id, err)
				continue
			}
			if rec.GetSeq() != seq || rec.GetContent() != "content of "+id {
				t.Errorf("shard %q: id %q read back seq %d content %q, acked seq %d", shardName, id, rec.GetSeq(), rec.GetContent(), seq)
			}
			if other, dup := seqs[seq]; dup {
				t.Errorf("shard %q: seq %d given to %q and %q", shardName, seq, other, id)
			}
			seqs[seq] = id
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func seqsOf(rs []shard.Result) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}
