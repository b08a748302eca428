package subscribe

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/rolloutd/rolloutd/internal/validate"
)

// A subscription delivers every record of every shard under its prefix,
// those that exist and those created while it runs (the prefix shard
// itself and nested ones), each in seq order with no gap, whether its
// writer is local or another instance's; nothing of the neighbours that
// only share the prefix's characters.
func TestDeliversExistingAndNewShards(t *testing.T) {
	v := newEnv(t, fast)
	tails := map[string]uint64{}
	for _, s := range []string{"exp/a", "exp/b"} {
		tails[s] = v.appendN(s, 3, s == "exp/a")
	}
	v.appendN("exp-x", 1, true)
	v.appendN("expo", 1, false)
	s := v.subscribe(Request{Prefix: "exp"})
	s.waitFor(t, "Started", func(s *sub) bool { return s.started != nil })
	for round := range 5 {
		for _, name := range []string{"exp/a", "exp/b", "exp", "exp/c/d"} {
			tails[name] = v.appendN(name, 1+round%3, name != "exp/b")
		}
	}
	for name, tail := range tails {
		s.reached(t, name, tail)
	}
	s.stop(t)
	for name, tail := range tails {
		s.checkRun(t, name, 0, tail)
	}
	if got := slices.Sorted(maps.Keys(s.cursors)); !slices.Equal(got, []string{"exp", "exp/a", "exp/b", "exp/c/d"}) {
		t.Fatalf("delivered shards %v", got)
	}
	if s.started.ConsumerGeneration != 0 {
		t.Fatalf("Started carries generation %d without a consumer", s.started.ConsumerGeneration)
	}
}

// LATEST starts each existing shard after its last seq at the start, and
// a shard created later from its first record; positions override either.
func TestStartLatestAndPositions(t *testing.T) {
	v := newEnv(t, fast)
	v.appendN("p/old", 4, true)
	v.appendN("p/pinned", 5, false)
	s := v.subscribe(Request{Prefix: "p", Start: StartLatest, Positions: map[string]uint64{"p/pinned": 2}})
	s.waitFor(t, "Started", func(s *sub) bool { return s.started != nil })
	old := v.appendN("p/old", 2, true)
	pinned := v.appendN("p/pinned", 1, false)
	created := v.appendN("p/new", 2, false)
	s.reached(t, "p/old", old)
	s.reached(t, "p/pinned", pinned)
	s.reached(t, "p/new", created)
	s.stop(t)
	s.checkRun(t, "p/old", 4, old)
	s.checkRun(t, "p/pinned", 2, pinned)
	s.checkRun(t, "p/new", 0, created)

	e := v.subscribe(Request{Prefix: "p", Start: StartEarliest})
	e.reached(t, "p/old", old)
	e.stop(t)
	e.checkRun(t, "p/old", 0, old)
}

// A consumer's stored positions start the shards they name (and its
// generation is in Started); request positions override them; a missing
// consumer is ErrConsumerNotFound with CONSUMER and earliest by default.
func TestStartFromConsumer(t *testing.T) {
	o := fast
	var asked []string
	o.ConsumerPositions = func(_ context.Context, prefix, name string) (map[string]uint64, uint64, bool, error) {
		asked = append(asked, prefix+"|"+name)
		if name != "trainer" {
			return nil, 0, false, nil
		}
		return map[string]uint64{"c/a": 3, "c/b": 1, "other/x": 9}, 7, true, nil
	}
	v := newEnv(t, o)
	a := v.appendN("c/a", 5, true)
	b := v.appendN("c/b", 2, true)
	s := v.subscribe(Request{Prefix: "c", Consumer: "trainer", Positions: map[string]uint64{"c/b": 0}})
	s.reached(t, "c/a", a)
	s.reached(t, "c/b", b)
	s.stop(t)
	s.checkRun(t, "c/a", 3, a)
	s.checkRun(t, "c/b", 0, b)
	if s.started.ConsumerGeneration != 7 {
		t.Fatalf("Started carries generation %d, want 7", s.started.ConsumerGeneration)
	}
	if !slices.Equal(asked, []string{"c|trainer"}) {
		t.Fatalf("asked for consumers %v", asked)
	}

	err := v.e.Subscribe(context.Background(), Request{Prefix: "c", Start: StartConsumer, Consumer: "nobody"}, func(Message) error { return nil })
	if !errors.Is(err, ErrConsumerNotFound) {
		t.Fatalf("START_CONSUMER of a missing consumer: %v", err)
	}
	d := v.subscribe(Request{Prefix: "c", Consumer: "nobody"})
	d.reached(t, "c/a", a)
	d.stop(t)
	d.checkRun(t, "c/a", 0, a)
}

// Bad requests are refused before anything is read or started.
func TestRejectsBadRequests(t *testing.T) {
	v := newEnv(t, fast)
	for _, r := range []Request{
		{Prefix: "Bad"},
		{Prefix: "/a"},
		{Prefix: "a", Member: 3, Members: 3},
		{Prefix: "a", Member: 1},
		{Prefix: "a", Positions: map[string]uint64{"ab": 1}},
		{Prefix: "a", Positions: map[string]uint64{"a/../b": 1}},
		{Prefix: "a", Consumer: "_x"},
		{Prefix: "a", Consumer: "UPPER"},
		{Prefix: "a", Start: StartConsumer},
		{Prefix: "a", Start: 9},
	} {
		err := v.e.Subscribe(context.Background(), r, func(Message) error { return errors.New("sent") })
		if !errors.Is(err, validate.ErrInvalid) {
			t.Errorf("%+v: %v, want a validation error", r, err)
		}
	}
	if err := v.e.Subscribe(context.Background(), Request{Consumer: "x"}, func(Message) error { return nil }); !errors.Is(err, ErrConsumersUnavailable) {
		t.Errorf("a consumer without ConsumerPositions: %v", err)
	}
	if _, lists, _ := v.ops.counts(nil); lists != 0 || v.e.Subscriptions() != 0 {
		t.Errorf("refused requests listed %d times, %d subscriptions run", lists, v.e.Subscriptions())
	}
}

// Three members split the shards: each shard is delivered to exactly one,
// the one Takes names, existing and new shards alike.
func TestSplitMembersDisjointAndCovering(t *testing.T) {
	v := newEnv(t, fast)
	tails := map[string]uint64{}
	for i := range 12 {
		name := fmt.Sprintf("m/s%d", i)
		tails[name] = v.appendN(name, 1+i%2, i%2 == 0)
	}
	var subs []*sub
	for m := range uint32(3) {
		subs = append(subs, v.subscribe(Request{Prefix: "m", Member: m, Members: 3}))
	}
	for i := 12; i < 18; i++ {
		name := fmt.Sprintf("m/s%d", i)
		tails[name] = v.appendN(name, 1, false)
	}
	for name, tail := range tails {
		subs[Member(name, 3)].reached(t, name, tail)
	}
	for m, s := range subs {
		s.stop(t)
		for name := range s.cursors {
			if Member(name, 3) != uint32(m) {
				t.Errorf("member %d got shard %s of member %d", m, name, Member(name, 3))
			}
		}
	}
	for name, tail := range tails {
		subs[Member(name, 3)].checkRun(t, name, 0, tail)
	}
}

// A deleted shard is reported with the cursor reached; the subscription
// goes on watching it and delivers the re-created shard's records, whose
// seqs continue above the deleted ones.
func TestDeletedThenRecreatedShard(t *testing.T) {
	v := newEnv(t, fast)
	tail := v.appendN("d/x", 3, true)
	s := v.subscribe(Request{Prefix: "d"})
	s.reached(t, "d/x", tail)
	v.remove("d/x")
	s.waitFor(t, "the deletion", func(s *sub) bool { return len(s.deleted["d/x"]) > 0 })
	again := v.appendN("d/x", 2, false)
	if again <= tail+1 {
		t.Fatalf("the re-created shard's seqs end at %d, not above %d", again, tail)
	}
	s.reached(t, "d/x", again)
	s.stop(t)
	if got := s.deleted["d/x"]; len(got) != 1 || got[0] != tail {
		t.Fatalf("deletions reported at cursors %v, want [%d]", got, tail)
	}
	got := s.seqs["d/x"]
	want := []uint64{1, 2, 3, again - 1, again}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered seqs %v, want %v", got, want)
	}
}

// Subscriptions end with their context, and the engine's Close stops the
// watchers and readers they leave (goleak checks the goroutines).
func TestEndsWithItsContext(t *testing.T) {
	v := newEnv(t, fast)
	v.appendN("l/a", 1, true)
	var subs []*sub
	for range 5 {
		subs = append(subs, v.subscribe(Request{Prefix: "l"}))
	}
	for _, s := range subs {
		s.reached(t, "l/a", 1)
	}
	if n := v.e.Subscriptions(); n != 5 {
		t.Fatalf("%d subscriptions, want 5", n)
	}
	for _, s := range subs {
		s.stop(t)
	}
	if n := v.e.Subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after they ended", n)
	}
	v.e.mu.Lock()
	watchers := len(v.e.watchers)
	v.e.mu.Unlock()
	if watchers != 0 || v.e.Readers() != 0 {
		t.Fatalf("%d watchers and %d readers left", watchers, v.e.Readers())
	}
}
