package consumer

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/validate"
)

func TestCommitMergesAndNeverMovesBackwards(t *testing.T) {
	eachBackend(t, func(t *testing.T, bs blob.Store) {
		s, clk := newStore(t, bs)
		k := Key{Prefix: "exp-1", Name: "trainer"}
		c := mustCommit(t, s, k, map[string]uint64{"exp-1/a": 5, "exp-1/b": 3}, 0)
		if c.Generation != 1 || !c.CreatedAt.Equal(epoch) || !c.UpdatedAt.Equal(epoch) {
			t.Fatalf("first commit: %+v, want generation 1 created and updated at %v", c, epoch)
		}
		clk.Advance(time.Second)
		// a lower cursor keeps the stored one; a higher one and a new shard land.
		c = mustCommit(t, s, k, map[string]uint64{"exp-1/a": 2, "exp-1/b": 7, "exp-1/c/d": 1}, 1)
		want := map[string]uint64{"exp-1/a": 5, "exp-1/b": 7, "exp-1/c/d": 1}
		if !maps.Equal(c.Positions, want) {
			t.Fatalf("after merge: %v, want %v", c.Positions, want)
		}
		got := mustLoad(t, s, k)
		if !maps.Equal(got.Positions, want) || got.Generation != 1 || !got.CreatedAt.Equal(epoch) || !got.UpdatedAt.Equal(epoch.Add(time.Second)) {
			t.Fatalf("stored: %+v, want %v at generation 1, created %v, updated a second later", got, want, epoch)
		}
	})
}

func TestCommitThatChangesNothingDoesNotWrite(t *testing.T) {
	eachBackend(t, func(t *testing.T, bs blob.Store) {
		fs := counted(bs)
		s, clk := newStore(t, fs)
		k := Key{Name: "all"}
		mustCommit(t, s, k, map[string]uint64{"a": 5, "b/c": 3}, 0)
		puts := fs.Calls(faultstore.OpPut)
		clk.Advance(time.Minute)
		for _, pos := range []map[string]uint64{nil, {"a": 5}, {"a": 4, "b/c": 3}} {
			c := mustCommit(t, s, k, pos, 1)
			if !c.UpdatedAt.Equal(epoch) {
				t.Errorf("commit of %v changed UpdatedAt to %v", pos, c.UpdatedAt)
			}
		}
		if n := fs.Calls(faultstore.OpPut) - puts; n != 0 {
			t.Fatalf("commits that raise nothing made %d puts, want 0", n)
		}
		mustCommit(t, s, k, map[string]uint64{"a": 6}, 0)
		if n := fs.Calls(faultstore.OpPut) - puts; n != 1 {
			t.Fatalf("a commit that raises a cursor made %d puts, want 1", n)
		}
	})
}

func TestCommitCreatesEmptyConsumer(t *testing.T) {
	s, _ := newStore(t, backends[0].open(t))
	k := Key{Prefix: "p", Name: "x"}
	if _, err := s.Load(ctxT(t), k); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a consumer never committed: %v, want ErrNotFound", err)
	}
	c := mustCommit(t, s, k, nil, 0)
	if c.Generation != 1 || len(c.Positions) != 0 {
		t.Fatalf("empty first commit: %+v", c)
	}
	mustLoad(t, s, k)
}

func TestResetAndStaleCommit(t *testing.T) {
	eachBackend(t, func(t *testing.T, bs blob.Store) {
		s, clk := newStore(t, bs)
		k := Key{Prefix: "team-a/exp", Name: "r0"}
		mustCommit(t, s, k, map[string]uint64{"team-a/exp/s1": 100, "team-a/exp/s2": 50}, 0)
		clk.Advance(time.Second)
		c, err := s.Reset(ctxT(t), k, map[string]uint64{"team-a/exp/s1": 10})
		if err != nil {
			t.Fatal(err)
		}
		if c.Generation != 2 || !maps.Equal(c.Positions, map[string]uint64{"team-a/exp/s1": 10}) || !c.CreatedAt.Equal(epoch) {
			t.Fatalf("after reset: %+v, want generation 2 and exactly s1=10, created at %v", c, epoch)
		}
		// A member still on generation 1 cannot undo the reset.
		_, err = s.Commit(ctxT(t), k, map[string]uint64{"team-a/exp/s1": 100, "team-a/exp/s2": 60}, 1)
		var re *ResetError
		if !errors.Is(err, ErrReset) || !errors.As(err, &re) || re.Generation != 2 || re.Committed != 1 {
			t.Fatalf("stale commit: %v, want a ResetError at generation 2", err)
		}
		if got := mustLoad(t, s, k); !maps.Equal(got.Positions, map[string]uint64{"team-a/exp/s1": 10}) {
			t.Fatalf("a refused commit changed the positions: %v", got.Positions)
		}
		// A commit for generation 2, or for none, merges.
		mustCommit(t, s, k, map[string]uint64{"team-a/exp/s1": 11}, 2)
		c = mustCommit(t, s, k, map[string]uint64{"team-a/exp/s2": 1}, 0)
		if want := map[string]uint64{"team-a/exp/s1": 11, "team-a/exp/s2": 1}; !maps.Equal(c.Positions, want) || c.Generation != 2 {
			t.Fatalf("after commits: %+v, want %v at generation 2", c, want)
		}
		// A future generation is refused too.
		if _, err := s.Commit(ctxT(t), k, nil, 3); !errors.Is(err, ErrReset) {
			t.Fatalf("commit for generation 3 of a consumer at 2: %v, want ErrReset", err)
		}
		// Reset to nothing: every shard from its first record.
		c, err = s.Reset(ctxT(t), k, nil)
		if err != nil || c.Generation != 3 || len(c.Positions) != 0 {
			t.Fatalf("reset to earliest: %+v, %v", c, err)
		}
	})
}

func TestResetCreates(t *testing.T) {
	s, _ := newStore(t, backends[0].open(t))
	k := Key{Prefix: "p", Name: "fresh"}
	c, err := s.Reset(ctxT(t), k, map[string]uint64{"p/a": 3})
	if err != nil || c.Generation != 2 {
		t.Fatalf("reset of a missing consumer: %+v, %v; want generation 2", c, err)
	}
	// A member that subscribed before the consumer existed commits for
	// generation 1, the one a first commit creates: refused, or it would
	// raise the reset positions again.
	var re *ResetError
	if _, err := s.Commit(ctxT(t), k, map[string]uint64{"p/a": 9}, 1); !errors.As(err, &re) || re.Generation != 2 {
		t.Fatalf("a commit for generation 1 after a reset created the consumer: %v, want a ResetError at generation 2", err)
	}
}

func TestDelete(t *testing.T) {
	eachBackend(t, func(t *testing.T, bs blob.Store) {
		s, _ := newStore(t, bs)
		k := Key{Prefix: "p", Name: "gone"}
		if err := s.Delete(ctxT(t), k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("delete of a missing consumer: %v, want ErrNotFound", err)
		}
		mustCommit(t, s, k, map[string]uint64{"p/a": 1}, 0)
		if _, err := s.Reset(ctxT(t), k, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctxT(t), k); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(ctxT(t), k); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Load after delete: %v, want ErrNotFound", err)
		}
		// A member of generation 2 learns that the consumer is gone...
		var re *ResetError
		if _, err := s.Commit(ctxT(t), k, map[string]uint64{"p/a": 9}, 2); !errors.As(err, &re) || re.Generation != 0 {
			t.Fatalf("commit for generation 2 after delete: %v, want a ResetError at generation 0", err)
		}
		// ... and one of generation 1 (or none) creates it afresh.
		if c := mustCommit(t, s, k, map[string]uint64{"p/a": 9}, 1); c.Generation != 1 {
			t.Fatalf("re-created at generation %d", c.Generation)
		}
	})
}

func TestValidation(t *testing.T) {
	s, _ := newStore(t, backends[0].open(t))
	ctx := ctxT(t)
	for _, tc := range []struct {
		k   Key
		pos map[string]uint64
	}{
		{Key{Prefix: "p", Name: ""}, nil},
		{Key{Prefix: "p", Name: "A"}, nil},
		{Key{Prefix: "p", Name: "a/b"}, nil},
		{Key{Prefix: "p", Name: "_x"}, nil},
		{Key{Prefix: "p", Name: strings.Repeat("x", 64)}, nil},
		{Key{Prefix: "P", Name: "x"}, nil},
		{Key{Prefix: "a//b", Name: "x"}, nil},
		{Key{Prefix: "p", Name: "x"}, map[string]uint64{"q/a": 1}},  // not under the prefix
		{Key{Prefix: "p", Name: "x"}, map[string]uint64{"pq": 1}},   // not on a whole segment
		{Key{Prefix: "p", Name: "x"}, map[string]uint64{"p/_a": 1}}, // not a shard
		{Key{Prefix: "p", Name: "x"}, map[string]uint64{"p/a/": 1}}, // not a shard
		{Key{Prefix: "", Name: "x"}, map[string]uint64{"../a": 1}},  // not a shard
	} {
		if _, err := s.Commit(ctx, tc.k, tc.pos, 0); !errors.Is(err, validate.ErrInvalid) {
			t.Errorf("Commit(%q, %v): %v, want validate.ErrInvalid", tc.k, tc.pos, err)
		}
		if _, err := s.Reset(ctx, tc.k, tc.pos); !errors.Is(err, validate.ErrInvalid) {
			t.Errorf("Reset(%q, %v): %v, want validate.ErrInvalid", tc.k, tc.pos, err)
		}
	}
	// A trailing '/' on the prefix is ignored; the prefix's own shard is
	// under it.
	c := mustCommit(t, s, Key{Prefix: "p/", Name: "x"}, map[string]uint64{"p": 1, "p/a": 2}, 0)
	if c.Prefix != "p" {
		t.Fatalf("prefix %q, want %q", c.Prefix, "p")
	}
}

func TestPositionsBound(t *testing.T) {
	s, _ := newStore(t, backends[0].open(t))
	k := Key{Name: "big"}
	many := func(from, n int) map[string]uint64 {
		m := make(map[string]uint64, n)
		for i := from; i < from+n; i++ {
			m[fmt.Sprintf("s%d", i)] = 1
		}
		return m
	}
	if _, err := s.Commit(ctxT(t), k, many(0, MaxPositions+1), 0); !errors.Is(err, ErrTooManyPositions) {
		t.Fatalf("commit of MaxPositions+1 shards: %v, want ErrTooManyPositions", err)
	}
	// The bound on what a merge would store, lowered to keep the test fast.
	s.maxPositions = 10
	mustCommit(t, s, k, many(0, 10), 0)
	if _, err := s.Commit(ctxT(t), k, many(10, 1), 0); !errors.Is(err, ErrTooManyPositions) {
		t.Fatalf("a commit past the bound: %v, want ErrTooManyPositions", err)
	}
	mustCommit(t, s, k, many(5, 5), 0) // within the stored shards
	if c := mustLoad(t, s, k); len(c.Positions) != 10 {
		t.Fatalf("%d positions stored", len(c.Positions))
	}
}

func TestBlobNames(t *testing.T) {
	for _, tc := range []struct {
		k    Key
		name string
	}{
		{Key{Name: "x"}, "consumers/_c/x"},
		{Key{Prefix: "a", Name: "x"}, "consumers/a/_c/x"},
		{Key{Prefix: "a/b.c/d", Name: "0-x_y.z"}, "consumers/a/b.c/d/_c/0-x_y.z"},
	} {
		if got := blobName(tc.k); got != tc.name {
			t.Errorf("blobName(%v) = %q, want %q", tc.k, got, tc.name)
		}
		if k, ok := parseBlobName(tc.name); !ok || k != tc.k {
			t.Errorf("parseBlobName(%q) = %v, %t", tc.name, k, ok)
		}
		if strings.HasPrefix(tc.name, "shards/") {
			t.Errorf("%q is under shards/", tc.name)
		}
	}
	for _, bad := range []string{"consumers/x", "consumers/_c/", "consumers/a/_c/b/c", "shards/a/_c/x", "consumers/A/_c/x", "consumers/a/_c/_x", "consumers//_c/x"} {
		if k, ok := parseBlobName(bad); ok {
			t.Errorf("parseBlobName(%q) = %v, want not a consumer", bad, k)
		}
	}
}
