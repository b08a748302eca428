package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	ackledger "github.com/rolloutd/rolloutd/internal/testutil/ledger"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

func testOptions(t testing.TB) Options {
	return Options{Logger: zaptest.NewLogger(t), RetryBackoff: time.Millisecond}
}

func open(t testing.TB, store blob.Store, shard string) *Writer {
	t.Helper()
	w, err := Open(context.Background(), store, shard, testOptions(t))
	if err != nil {
		t.Fatalf("Open(%q): %v", shard, err)
	}
	t.Cleanup(w.Abort)
	return w
}

func record(id string) *rolloutv1.Record { return ackledger.Record(id) }

func entries(t testing.TB, ids ...string) []Entry {
	t.Helper()
	out := make([]Entry, len(ids))
	for i, id := range ids {
		e, err := Prepare(record(id), time.Unix(1700000000, 0))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = e
	}
	return out
}

// ledger records every acknowledged append, for checking that each is
// readable, exactly once, afterwards.
type ledger struct {
	mu   sync.Mutex
	acks map[string]Result
}

func newLedger() *ledger { return &ledger{acks: map[string]Result{}} }

func (l *ledger) add(t testing.TB, rs []Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		if prev, dup := l.acks[r.ID]; dup {
			t.Errorf("id %q acked twice: %+v and %+v", r.ID, prev, r)
		}
		l.acks[r.ID] = r
	}
}

// verify checks that every acked record reads back with its acked seq and
// content, and that the shard's sequence numbers are unique and every record
// appears exactly once.
func (l *ledger) verify(t testing.TB, store blob.Store, shard string) {
	t.Helper()
	r := NewReader(store, ReaderOptions{})
	ctx := context.Background()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, ack := range l.acks {
		got, err := r.Get(ctx, shard, id)
		if err != nil {
			t.Errorf("Get(%q) of an acked record: %v", id, err)
			continue
		}
		want := record(id)
		want.Seq = ack.Seq
		want.CreatedAt = got.CreatedAt
		if !proto.Equal(got, want) {
			t.Errorf("Get(%q) = %v, want %v", id, got, want)
		}
	}
	// The shared ledger, straight from storage: each acked record exactly
	// once at its seq, and the shard's own invariants. This suite does not
	// track what may have landed, so records it stored without an ack
	// (outcome unknown) are not its concern.
	acks := ackledger.New()
	for id, ack := range l.acks {
		_ = acks.Acked(shard, id, ackledger.Ack{Seq: ack.Seq}) // ids are unique here
	}
	_, errs := acks.Check(ctx, store, ackledger.Manifests(NewReader(store, ReaderOptions{}).Manifest, ErrShardNotFound))
	for _, err := range errs {
		if u := (*ackledger.UnexpectedError)(nil); !errors.As(err, &u) {
			t.Error(err)
		}
	}
	seen := countRecords(t, store, shard)
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %q stored %d times in live generations", id, n)
		}
	}
	for id := range l.acks {
		if seen[id] == 0 {
			t.Errorf("acked id %q is in no live generation", id)
		}
	}
}

// countRecords reads every live generation of the shard whole and counts
// each id; it also checks sequence numbers are unique and increasing.
func countRecords(t testing.TB, store blob.Store, shard string) map[string]int {
	t.Helper()
	ctx := context.Background()
	// The reader's view: under protocol v2, the checkpoint and the log
	// positions after it.
	cache := NewIndexCache(1 << 20)
	m, err := NewReader(store, ReaderOptions{Cache: cache}).Manifest(ctx, shard)
	if err != nil {
		t.Fatalf("read manifest: %v", err)
	}
	seen := map[string]int{}
	var lastSeq uint64
	for _, g := range m.GetGenerations() {
		idx, err := shardlog.NewSource(store, cache, shard).Index(ctx, g)
		if err != nil {
			t.Fatalf("generation %d: %v", g.GetNumber(), err)
		}
		for _, e := range idx.Footer.GetEntries() {
			if e.GetSeq() <= lastSeq {
				t.Errorf("seq %d of %q not above %d", e.GetSeq(), e.GetId(), lastSeq)
			}
			lastSeq = e.GetSeq()
			seen[e.GetId()]++
		}
	}
	return seen
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
