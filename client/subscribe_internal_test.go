package client

import (
	"errors"
	"fmt"
	"testing"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

func batchMsg(shard string, cursor uint64, deleted bool, seqs ...uint64) *rolloutv1.SubscribeResponse {
	m := &rolloutv1.SubscribeResponse{Shard: shard, Cursor: cursor, ShardDeleted: deleted}
	for _, s := range seqs {
		m.Records = append(m.Records, &rolloutv1.Record{Id: fmt.Sprint("r", s), Seq: s})
	}
	return m
}

func seqsOf(b *SubscribeBatch) []uint64 {
	var out []uint64
	for _, r := range b.Records {
		out = append(out, r.GetSeq())
	}
	return out
}

// The cursors received per shard start at the caller's positions and
// follow the stream; what a resumed stream sends again at or below them is
// dropped, records and deletions alike, and a message that brings nothing
// new is no batch.
func TestReceivedDropsWhatWasReceived(t *testing.T) {
	r := newReceived(map[string]uint64{"p/b": 10})
	tests := []struct {
		msg     *rolloutv1.SubscribeResponse
		want    string // "" for no batch
		cursors string // r.at after it
	}{
		{&rolloutv1.SubscribeResponse{Started: &rolloutv1.SubscribeStarted{ConsumerGeneration: 1}}, "", "map[p/b:10]"},
		{batchMsg("p/a", 3, false, 1, 2, 3), "p/a [1 2 3] 3 false", "map[p/a:3 p/b:10]"},
		// A resumed stream that repeats 2 and 3.
		{batchMsg("p/a", 5, false, 2, 3, 4, 5), "p/a [4 5] 5 false", "map[p/a:5 p/b:10]"},
		{batchMsg("p/a", 5, false), "", "map[p/a:5 p/b:10]"},
		{batchMsg("p/a", 4, false, 4), "", "map[p/a:5 p/b:10]"},
		// Filters passed over records up to 8: the cursor moves.
		{batchMsg("p/a", 8, false), "p/a [] 8 false", "map[p/a:8 p/b:10]"},
		// The caller's position for p/b.
		{batchMsg("p/b", 12, false, 9, 10, 11, 12), "p/b [11 12] 12 false", "map[p/a:8 p/b:12]"},
		{batchMsg("p/b", 14, true), "p/b [] 14 true", "map[p/a:8 p/b:14]"},
		// The same deletion again, after a resume: reported once.
		{batchMsg("p/b", 14, true), "", "map[p/a:8 p/b:14]"},
		// Re-created, with seqs above the deleted ones, and deleted again.
		{batchMsg("p/b", 15, false, 15), "p/b [15] 15 false", "map[p/a:8 p/b:15]"},
		{batchMsg("p/b", 15, true), "p/b [] 15 true", "map[p/a:8 p/b:15]"},
		// A shard first seen deleted is reported.
		{batchMsg("p/c", 7, true), "p/c [] 7 true", "map[p/a:8 p/b:15 p/c:7]"},
	}
	for i, tt := range tests {
		b := r.accept(tt.msg)
		got := ""
		if b != nil {
			got = fmt.Sprintf("%s %v %d %v", b.Shard, seqsOf(b), b.Cursor, b.Deleted)
			if b.Records == nil {
				got = fmt.Sprintf("%s [] %d %v", b.Shard, b.Cursor, b.Deleted)
			}
		}
		if got != tt.want || fmt.Sprint(r.at) != tt.cursors {
			t.Errorf("message %d: batch %q, cursors %v; want %q, %s", i, got, r.at, tt.want, tt.cursors)
		}
	}
}

// A resumed stream asks for the cursors received, not only those yielded
// or committed, with the subscription's options.
func TestResumeRequestCarriesTheReceivedCursors(t *testing.T) {
	training := true
	s := &Subscription{prefix: "p", opts: SubscribeOptions{Start: StartLatest, Consumer: "trainer", Member: 1, Members: 3,
		RolloutID: "r", IncludeInTraining: &training, Role: rolloutv1.Role_ROLE_GRADE, Fields: []string{"reward"}},
		recv: newReceived(map[string]uint64{"p/x": 2})}
	s.recv.accept(batchMsg("p/a", 9, false, 9))
	req := s.request()
	want := "prefix:\"p\" start:SUBSCRIBE_START_LATEST consumer:\"trainer\" positions:{key:\"p/a\" value:9} positions:{key:\"p/x\" value:2} member:1 members:3 rollout_id:\"r\" include_in_training:true role:ROLE_GRADE fields:{paths:\"reward\"}"
	if got := fmt.Sprint(req); normalize(got) != normalize(want) {
		t.Errorf("request %s\nwant    %s", got, want)
	}
	s.recv.accept(batchMsg("p/a", 11, false))
	if req.GetPositions()["p/a"] != 9 || s.request().GetPositions()["p/a"] != 11 {
		t.Errorf("a request's positions are not a copy taken when it is made")
	}
	// Once a LATEST stream has started, the starts it named are among the
	// cursors received, and a resume reads every other shard from its
	// first record: from EARLIEST.
	s.opened = true
	if got := s.request().GetStart(); got != rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST {
		t.Errorf("a resumed LATEST subscription asks for %v, want SUBSCRIBE_START_EARLIEST", got)
	}
}

// normalize drops the spaces prototext puts at random between fields.
func normalize(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r != ' ' {
			out = append(out, r)
		}
	}
	return string(out)
}

// A resumed stream keeps the consumer generation the subscription read; a
// reset (another generation) or, when the subscription starts from the
// consumer, a deletion (0) ends it with ErrConsumerReset. A consumer that
// did not exist is taken at the generation it has when it appears.
func TestResumeKeepsTheConsumerGeneration(t *testing.T) {
	tests := []struct {
		start   SubscribeStart
		first   uint64
		resumed uint64
		reset   bool
	}{
		{StartDefault, 3, 3, false},
		{StartDefault, 3, 4, true},
		{StartConsumer, 3, 4, true},
		{StartDefault, 3, 0, true}, // deleted
		{StartConsumer, 3, 0, true},
		{StartEarliest, 3, 0, false}, // not started from the consumer
		{StartLatest, 3, 0, false},
		{StartEarliest, 3, 4, true},
		{StartDefault, 0, 0, false},
		{StartDefault, 0, 1, false}, // created since
		{StartDefault, 0, 2, true},  // created and reset since
		{StartLatest, 0, 2, true},
	}
	for _, tt := range tests {
		s := &Subscription{prefix: "p", opts: SubscribeOptions{Start: tt.start, Consumer: "c"}}
		if err := s.checkGeneration(tt.first); err != nil {
			t.Fatalf("the first stream: %v", err)
		}
		s.opened = true
		err := s.checkGeneration(tt.resumed)
		if errors.Is(err, ErrConsumerReset) != tt.reset || (err != nil && !tt.reset) {
			t.Errorf("start %d, generation %d then %d: %v; want reset %v", tt.start, tt.first, tt.resumed, err, tt.reset)
		}
		want := max(tt.first, tt.resumed)
		if tt.reset {
			want = tt.first
		}
		if g := s.ConsumerGeneration(); g != want {
			t.Errorf("start %d, generation %d then %d: the subscription keeps %d, want %d", tt.start, tt.first, tt.resumed, g, want)
		}
	}
}

// SubscribeStart's values are the proto's, which requests send as they
// are.
func TestSubscribeStartIsTheProtos(t *testing.T) {
	for s, want := range map[SubscribeStart]rolloutv1.SubscribeStart{
		StartDefault:  rolloutv1.SubscribeStart_SUBSCRIBE_START_UNSPECIFIED,
		StartEarliest: rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST,
		StartLatest:   rolloutv1.SubscribeStart_SUBSCRIBE_START_LATEST,
		StartConsumer: rolloutv1.SubscribeStart_SUBSCRIBE_START_CONSUMER,
	} {
		if rolloutv1.SubscribeStart(s) != want {
			t.Errorf("SubscribeStart %d is sent as %v, want %v", s, rolloutv1.SubscribeStart(s), want)
		}
	}
	if n := len(rolloutv1.SubscribeStart_name); n != 4 {
		t.Errorf("rolloutv1.SubscribeStart has %d values, the client knows 4", n)
	}
}
