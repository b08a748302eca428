package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard"
	shardfollow "github.com/rolloutd/rolloutd/internal/shard/follow"
	ackledger "github.com/rolloutd/rolloutd/internal/testutil/ledger"
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

func record(id string) *rolloutv1.Record { return ackledger.Record(id) }

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
// readable, exactly once. The storage side is the shared ledger's.
type ledger struct{ *ackledger.Ledger }

func newLedger() *ledger { return &ledger{ackledger.New()} }

func (l *ledger) add(t testing.TB, shardName string, ids []string, seqs []uint64) {
	for i, id := range ids {
		if err := l.Acked(shardName, id, ackledger.Ack{Seq: seqs[i]}); err != nil {
			t.Errorf("shard %q: id %q acked twice: %v", shardName, id, err)
		}
	}
}

func (l *ledger) count() int { return l.Len() }

// verify checks, straight from storage, that each shard holds exactly the
// acked records, each once at its acked seq; then that every acked record
// reads back through a reader with its acked seq and content, and that no
// seq was acked twice.
func (l *ledger) verify(t testing.TB, store blob.Store) {
	t.Helper()
	r := shard.NewReader(store, shard.ReaderOptions{})
	ctx := context.Background()
	_, errs := l.Check(ctx, store, ackledger.Manifests(r.Manifest, shard.ErrShardNotFound))
	for _, err := range errs {
		t.Error(err)
	}
	acked := map[string]map[string]uint64{} // shard → id → seq
	for _, k := range l.AckedKeys() {
		if acked[k.Shard] == nil {
			acked[k.Shard] = map[string]uint64{}
		}
		a, _ := l.Get(k.Shard, k.ID)
		acked[k.Shard][k.ID] = a.Seq
	}
	for shardName, ids := range acked {
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
			if rec.GetSeq() != seq || rec.GetContent() != ackledger.Content(id) {
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
