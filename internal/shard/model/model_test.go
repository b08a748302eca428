package model

import (
	"os"
	"reflect"
	"testing"
	"time"
)

// scenario is one bounded exploration. Writer sets are split across scenarios
// because three writers at three positions multiply into millions of states;
// each scenario is still exhaustive within its own bounds.
type scenario struct {
	name string
	cfg  Config
}

// scenarios picks the bounds from ROLLOUTD_MODEL_BOUND: unset for the default
// (seconds), "large" and "xl" for longer explorations (minutes).
func scenarios(t *testing.T) []scenario {
	base := func(ws WriterSet, positions, ids, faults int) Config {
		// The cap turns a runaway bound into a failure, not a swapping machine.
		return Config{Positions: positions, IDs: ids, Writers: ws, Faults: faults, Reads: 2, LagK: 1, StopAt: -1, MaxStates: 50_000_000}
	}
	oneRead := func(cfg Config) Config {
		cfg.Reads = 1
		return cfg
	}
	noReads := func(cfg Config) Config {
		cfg.Reads = 0
		return cfg
	}
	switch b := os.Getenv("ROLLOUTD_MODEL_BOUND"); b {
	case "":
		return []scenario{
			{"takeover", base(W0|W1, 3, 1, 1)},
			{"reopen", base(W0|W2, 3, 1, 1)},
			// One read: the other scenarios check reads against earlier reads.
			{"three-writers", oneRead(base(AllWriters, 2, 1, 1))},
			// The only default scenario whose writers reach the lag bound
			// (a fence and two batches fill checkpoint+2K at K = 1); no
			// reads and no faults keep it under 0.1 million states.
			{"lag-wait", noReads(base(W0|W1, 4, 3, 0))},
		}
	case "large":
		return []scenario{
			{"takeover", base(W0|W1, 3, 2, 1)},
			{"reopen", base(W0|W2, 3, 2, 2)},
			{"three-writers", base(AllWriters, 3, 1, 1)},
			{"lag-wait", noReads(base(W0|W1, 4, 3, 1))},
		}
	case "xl":
		// About 40 million states, minutes and up to 7 GB of memory.
		return []scenario{
			{"takeover", base(W0|W1, 4, 2, 1)},
			{"reopen", base(W0|W2, 4, 2, 2)},
			{"three-writers", base(AllWriters, 3, 1, 2)},
			{"lag-wait", oneRead(base(W0|W1, 4, 3, 0))},
		}
	default:
		t.Fatalf("ROLLOUTD_MODEL_BOUND=%q: want large or xl", b)
		return nil
	}
}

func explore(t *testing.T, cfg Config) *Result {
	t.Helper()
	start := time.Now()
	res, err := Explore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %+v: %d states, %d transitions, depth %d, in %v",
		cfg.Mutation, cfg, res.States, res.Transitions, res.Depth, time.Since(start).Round(time.Millisecond))
	return res
}

// TestCorrectProtocol explores every scenario and finds no counterexample.
// It also guards against a model that passes because it never gets anywhere:
// across the scenarios, every situation the invariants are about must occur.
func TestCorrectProtocol(t *testing.T) {
	total := 0
	coverage := map[string]int{}
	for _, sc := range scenarios(t) {
		t.Run(sc.name, func(t *testing.T) {
			res := explore(t, sc.cfg)
			total += res.States
			if res.Truncated {
				t.Fatalf("search truncated at %d states", res.States)
			}
			for _, v := range res.Violations {
				if v != nil {
					t.Errorf("counterexample:\n%s", v)
				}
			}
			for name, n := range res.Coverage {
				t.Logf("coverage: %s: %d transitions", name, n)
				coverage[name] += n
			}
		})
	}
	t.Logf("%d states explored in all", total)
	for name, n := range coverage {
		if n == 0 {
			t.Errorf("no %s in any scenario; an invariant may hold vacuously", name)
		}
	}
}

// Each mutation must yield the counterexample the issue names. Bounds are the
// smallest that reach it, so the search stops early; run with -v to read the
// traces.
func TestMutationsAreCaught(t *testing.T) {
	noReads := func(cfg Config) Config {
		cfg.Reads = 0
		return cfg
	}
	cfg := func(ws WriterSet, positions, ids, faults int, m Mutation, want Kind) Config {
		reads := 1
		if want == ReadRegression {
			reads = 2 // it takes a second read to lose what the first returned
		}
		return Config{Positions: positions, IDs: ids, Writers: ws, Faults: faults, Reads: reads, LagK: 1, Mutation: m, StopAt: want}
	}
	cases := []struct {
		name string
		cfg  Config
		also []Kind // further kinds the same search must find
	}{
		// (a) SlateDB #352/#1622: GC collects a fence, a stale writer's
		// create lands in its place and is acked, and no read sees it.
		{"gc-undoes-fence", cfg(W0|W1, 2, 1, 0, CollectFences, AckNotVisible), []Kind{FencedAck, TwoCommits}},
		// (b) A reader that trusts a missing position without the confirming
		// manifest read misses an ack whose position was checkpointed and
		// collected meanwhile; a second read may lose what the first saw.
		{"no-confirming-read", cfg(W0, 2, 1, 0, NoConfirmRead, ReadRegression), []Kind{AckNotVisible}},
		// (c) A reopen skips the fence with a create in doubt; the late
		// create lands after GC collected the position: a second commit.
		{"reopen-skips-fence-in-doubt", cfg(W0|W2, 2, 1, 1, SkipFenceInDoubt, TwoCommits), nil},
		// (c) with the reader, the same late landing hides an ack.
		{"reopen-skips-fence-in-doubt/issue-reader", cfg(W0|W2, 2, 2, 1, SkipFenceInDoubt|TrustCoveredProbes, AckNotVisible), nil},
		// Found by this model: the skip rule read literally lets a
		// reopen skip the fence after a writer that never placed its own.
		{"reopen-skips-fence-unconfirmed", cfg(AllWriters, 2, 2, 0, SkipFenceUnconfirmed, AckNotVisible), []Kind{FencedAck}},
		// Found by this model: a fence create answered "unknown" that lost
		// its race stays in flight, lands after GC collected the winner, and a
		// reader that trusts covered probes skips an acked record.
		{"reader-trusts-covered-probes", cfg(W0|W1, 3, 1, 1, TrustCoveredProbes, AckNotVisible), []Kind{ScanOrder}},
		// Id lookups that leave out the inherited tail store a retry twice.
		{"id-lookup-skips-tail", cfg(W0|W2, 3, 1, 0, ForgetTailIDs, DuplicateID), nil},
		// A merged generation beyond the checkpoint makes Scan repeat.
		{"merge-beyond-checkpoint", cfg(W0, 3, 2, 0, MergeBeyondCheckpoint, ScanOrder), []Kind{DuplicateID}},
		// Issue 28, finding 1: a writer set that keeps a writer stopped
		// with a create in doubt never opens its replacement.
		{"keep-in-doubt-writer", cfg(W0|W2, 2, 1, 0, KeepInDoubtWriter, Wedged), nil},
		// Issue 28, finding 4: an append waiting at the lag bound outlives
		// its writer, fenced by a takeover or aborted, and waits forever.
		{"lag-wait-outlives-stop", noReads(cfg(W0|W1, 4, 3, 0, LagWaitOutlivesStop, Wedged)), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := explore(t, tc.cfg)
			ce := res.Violations[tc.cfg.StopAt]
			if ce == nil {
				t.Fatalf("no %q counterexample under %s", tc.cfg.StopAt, tc.cfg.Mutation)
			}
			t.Logf("counterexample (%d steps):\n%s", len(ce.Steps), ce)
			for _, k := range tc.also {
				if res.Violations[k] == nil {
					t.Errorf("no %q counterexample under %s", k, tc.cfg.Mutation)
				}
			}
			for k, v := range res.Violations {
				if v != nil && Kind(k) != tc.cfg.StopAt {
					t.Logf("also found: %s: %s", v.Kind, v.Msg)
				}
			}
		})
	}
}

// State is hashed as raw memory, which is canonical only if every field is a
// byte-sized value: no padding, no pointers.
func TestStateHasNoPadding(t *testing.T) {
	var check func(reflect.Type)
	check = func(typ reflect.Type) {
		switch typ.Kind() {
		case reflect.Struct:
			for i := range typ.NumField() {
				check(typ.Field(i).Type)
			}
		case reflect.Array:
			check(typ.Elem())
		case reflect.Uint8, reflect.Int8, reflect.Bool:
		default:
			t.Errorf("State holds a %v; hashing its memory would not be canonical", typ)
		}
	}
	check(reflect.TypeFor[State]())
}
