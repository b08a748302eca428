package consumer

import (
	"context"
	"errors"
	"maps"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

var puts = []faultstore.Op{faultstore.OpPut}

// faulty is a Store over a faultstore over memstore, and a second Store
// that writes the same consumers past the faults (a competing member). They
// run on the wall clock: the backoff after an unavailable store waits on it.
func faulty(t *testing.T) (*Store, *faultstore.Store, *Store) {
	fs := faultstore.New(memstore.New(), 1)
	s := New(fs, Options{Logger: zaptest.NewLogger(t)})
	other := New(fs.Inner(), Options{Logger: zaptest.NewLogger(t)})
	return s, fs, other
}

func TestCommitAnswerLost(t *testing.T) {
	for _, first := range []bool{true, false} {
		s, fs, _ := faulty(t)
		k := Key{Prefix: "p", Name: "c"}
		if !first {
			mustCommit(t, s, k, map[string]uint64{"p/a": 1}, 0)
		}
		fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.LoseResponse, Count: 1})
		before := fs.InnerCalls(faultstore.OpPut)
		c := mustCommit(t, s, k, map[string]uint64{"p/a": 5, "p/b": 2}, 0)
		if want := map[string]uint64{"p/a": 5, "p/b": 2}; !maps.Equal(c.Positions, want) {
			t.Fatalf("first=%t: %v, want %v", first, c.Positions, want)
		}
		// The re-read found the write landed: no second put.
		if n := fs.InnerCalls(faultstore.OpPut) - before; n != 1 {
			t.Fatalf("first=%t: %d puts reached the store, want 1", first, n)
		}
	}
}

// An answer "outcome unknown" for a put that did not land: the re-read
// shows it, and the commit writes again.
func TestCommitUnclearNotLanded(t *testing.T) {
	s, fs, _ := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	mustCommit(t, s, k, map[string]uint64{"p/a": 1}, 0)
	fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.Fail, Err: blob.ErrOutcomeUnknown, Count: 2})
	fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.Fail, Err: blob.ErrUnavailable, Count: 2})
	c := mustCommit(t, s, k, map[string]uint64{"p/a": 5}, 0)
	if c.Positions["p/a"] != 5 || mustLoad(t, s, k).Positions["p/a"] != 5 {
		t.Fatalf("after unclear and unavailable puts: %v", c.Positions)
	}
}

// A write whose answer was lost and that cannot be re-read is never
// reported as stored, nor as not stored.
func TestCommitUnclearAndUnreadable(t *testing.T) {
	s, fs, _ := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	mustCommit(t, s, k, map[string]uint64{"p/a": 1}, 0)
	fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.LoseResponse, Count: 1})
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Fault: faultstore.Fail, Err: errors.New("boom"), Skip: 1})
	_, err := s.Commit(ctxT(t), k, map[string]uint64{"p/a": 5}, 0)
	if !errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Fatalf("commit whose put was lost and cannot be re-read: %v, want ErrOutcomeUnknown", err)
	}
	// Same for a reset.
	fs.Clear()
	fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.LoseResponse, Count: 1})
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Fault: faultstore.Fail, Err: errors.New("boom"), Skip: 1})
	if _, err := s.Reset(ctxT(t), k, nil); !errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Fatalf("reset whose put was lost and cannot be re-read: %v, want ErrOutcomeUnknown", err)
	}
}

// A member's commit that lands between another's read and write is merged,
// not overwritten.
func TestCommitConflictMerges(t *testing.T) {
	s, fs, other := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	mustCommit(t, s, k, map[string]uint64{"p/a": 1, "p/b": 1}, 0)
	fs.Intercept(faultstore.Match{Ops: puts, Count: 1}, func(ctx context.Context, _ faultstore.Call) error {
		_, err := other.Commit(ctx, k, map[string]uint64{"p/b": 9, "p/c": 3}, 0)
		return err
	})
	c := mustCommit(t, s, k, map[string]uint64{"p/a": 4, "p/b": 2}, 0)
	if want := map[string]uint64{"p/a": 4, "p/b": 9, "p/c": 3}; !maps.Equal(c.Positions, want) || !maps.Equal(mustLoad(t, s, k).Positions, want) {
		t.Fatalf("after a conflict: %v, want %v", c.Positions, want)
	}
}

// A reset whose answer was lost is recognised as landed, even when a
// commit for its generation was merged on top before the re-read: the
// generation is bumped once.
func TestResetAnswerLost(t *testing.T) {
	s, fs, other := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	mustCommit(t, s, k, map[string]uint64{"p/a": 100}, 0)
	fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.LoseResponse, Count: 1})
	fs.OnLanded(faultstore.Match{Ops: puts, Count: 1}, func(faultstore.Call) {
		if _, err := other.Commit(context.Background(), k, map[string]uint64{"p/a": 7}, 2); err != nil {
			t.Error(err)
		}
	})
	c, err := s.Reset(ctxT(t), k, map[string]uint64{"p/a": 5})
	if err != nil {
		t.Fatal(err)
	}
	if c.Generation != 2 || c.Positions["p/a"] != 7 {
		t.Fatalf("reset with a lost answer: %+v, want generation 2 with the commit on top (p/a=7)", c)
	}
	if got := mustLoad(t, s, k); got.Generation != 2 {
		t.Fatalf("stored generation %d, want 2: the reset was applied twice", got.Generation)
	}
}

// A reset that loses its condition to a commit of the old generation
// re-reads and resets over it: the commit cannot undo it.
func TestResetConflictWithStaleCommit(t *testing.T) {
	s, fs, other := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	mustCommit(t, s, k, map[string]uint64{"p/a": 100}, 0)
	fs.Intercept(faultstore.Match{Ops: puts, Count: 1}, func(ctx context.Context, _ faultstore.Call) error {
		_, err := other.Commit(ctx, k, map[string]uint64{"p/a": 200}, 1)
		return err
	})
	c, err := s.Reset(ctxT(t), k, map[string]uint64{"p/a": 5})
	if err != nil || c.Generation != 2 || c.Positions["p/a"] != 5 {
		t.Fatalf("reset: %+v, %v", c, err)
	}
	if _, err := other.Commit(ctxT(t), k, map[string]uint64{"p/a": 300}, 1); !errors.Is(err, ErrReset) {
		t.Fatalf("stale commit after the reset: %v, want ErrReset", err)
	}
	if got := mustLoad(t, s, k); got.Positions["p/a"] != 5 {
		t.Fatalf("stored %v", got.Positions)
	}
}

func TestDeleteAnswerLost(t *testing.T) {
	s, fs, _ := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	mustCommit(t, s, k, nil, 0)
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpDelete}, Fault: faultstore.LoseResponse, Count: 1})
	if err := s.Delete(ctxT(t), k); err != nil {
		t.Fatalf("delete whose answer was lost: %v, want success after the re-check", err)
	}
	if _, err := s.Load(ctxT(t), k); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
}

// A store that stays unavailable ends the call with its class, after a
// bounded number of attempts.
func TestCommitStoreUnavailable(t *testing.T) {
	s, fs, _ := faulty(t)
	k := Key{Prefix: "p", Name: "c"}
	fs.Add(faultstore.Rule{Ops: puts, Fault: faultstore.Fail, Err: blob.ErrUnavailable})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	// End the call after a few attempts rather than wait them all out.
	fs.Intercept(faultstore.Match{Ops: puts, Skip: 2}, func(context.Context, faultstore.Call) error { cancel(); return nil })
	if _, err := s.Commit(ctx, k, map[string]uint64{"p/a": 1}, 0); !errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Fatalf("commit on an unavailable store: %v, want ErrUnavailable only", err)
	}
}
