package faultstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/blobtest"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance: with no rules the wrapper is transparent.
func TestConformance(t *testing.T) {
	blobtest.Run(t, func(*testing.T) blob.Store { return faultstore.New(memstore.New(), 1) })
}

// TestConformanceWithDelays: latency alone changes no outcome. Real, short
// sleeps on a third of the calls also shuffle the racing subtests.
func TestConformanceWithDelays(t *testing.T) {
	blobtest.Run(t, func(*testing.T) blob.Store {
		return faultstore.New(memstore.New(), 2, faultstore.WithRules(
			faultstore.Rule{Fault: faultstore.Delay, Prob: 0.3, Delay: 100 * time.Microsecond}))
	})
}

func newStore(t *testing.T, seed int64, opts ...faultstore.Option) (*faultstore.Store, context.Context) {
	return faultstore.New(memstore.New(), seed, opts...), t.Context()
}

// outcomes returns which of n Gets failed under a 50% rule.
func outcomes(seed int64, n int) string {
	s := faultstore.New(memstore.New(), seed, faultstore.WithRules(
		faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Fault: faultstore.Fail, Prob: 0.5}))
	ctx := context.Background()
	_, _ = s.Put(ctx, "x", []byte("x"), blob.PutOptions{})
	b := make([]byte, n)
	for i := range b {
		_, _, err := s.Get(ctx, "x", blob.GetOptions{})
		switch {
		case err == nil:
			b[i] = '.'
		case errors.Is(err, blob.ErrUnavailable):
			b[i] = 'X'
		default:
			b[i] = '?'
		}
	}
	return string(b)
}

func TestDeterministic(t *testing.T) {
	a, b, c := outcomes(7, 200), outcomes(7, 200), outcomes(8, 200)
	if a != b {
		t.Fatalf("same seed, different outcomes:\n%s\n%s", a, b)
	}
	if a == c {
		t.Fatalf("seeds 7 and 8 give the same 200 outcomes")
	}
	fails := 0
	for _, r := range a {
		if r == 'X' {
			fails++
		}
		if r == '?' {
			t.Fatalf("unexpected error class in %s", a)
		}
	}
	if fails < 60 || fails > 140 {
		t.Fatalf("%d of 200 calls failed under Prob 0.5", fails)
	}
}

func TestSkipAndCount(t *testing.T) {
	s, ctx := newStore(t, 1)
	s.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Fail, Skip: 2, Count: 3})
	var got string
	for i := range 8 {
		_, err := s.Put(ctx, fmt.Sprintf("n%d", i), nil, blob.PutOptions{})
		switch {
		case err == nil:
			got += "."
		case errors.Is(err, blob.ErrUnavailable):
			got += "X"
		default:
			t.Fatalf("Put: %v", err)
		}
	}
	if got != "..XXX..." {
		t.Fatalf("outcomes %s, want ..XXX...", got)
	}
	if c, f, i := s.Calls(faultstore.OpPut), s.InnerCalls(faultstore.OpPut), s.Injected(faultstore.OpPut); c != 8 || f != 5 || i != 3 {
		t.Fatalf("calls %d, inner calls %d, injected %d; want 8, 5, 3", c, f, i)
	}
	// Heads are not affected and counted apart.
	if _, err := s.Head(ctx, "n0"); err != nil || s.Calls(faultstore.OpHead) != 1 {
		t.Fatalf("Head: %v, calls %d", err, s.Calls(faultstore.OpHead))
	}
	s.ResetCounts()
	for _, op := range faultstore.Ops {
		if s.Calls(op)+s.InnerCalls(op)+s.Injected(op) != 0 {
			t.Fatalf("%s counts survive ResetCounts", op)
		}
	}
}

func TestPrefixAndOps(t *testing.T) {
	s, ctx := newStore(t, 1)
	remove := s.Add(faultstore.Rule{Prefix: "a/", Ops: []faultstore.Op{faultstore.OpGet, faultstore.OpList, faultstore.OpDelete}, Fault: faultstore.Fail, Err: blob.ErrNotFound})
	for _, n := range []string{"a/x", "b/x"} {
		if _, err := s.Put(ctx, n, []byte(n), blob.PutOptions{}); err != nil {
			t.Fatalf("Put(%q) (not a matching op): %v", n, err)
		}
	}
	if _, _, err := s.Get(ctx, "a/x", blob.GetOptions{}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get(a/x): %v, want the rule's ErrNotFound", err)
	}
	if _, _, err := s.Get(ctx, "b/x", blob.GetOptions{}); err != nil {
		t.Fatalf("Get(b/x): %v", err)
	}
	if _, err := s.List(ctx, blob.ListOptions{Prefix: "a/"}); err == nil {
		t.Fatal("List(a/) passed a matching rule")
	}
	if p, err := s.List(ctx, blob.ListOptions{}); err != nil || len(p.Items) != 2 {
		t.Fatalf("List(\"\") (prefix does not start with a/) = %+v, %v", p, err)
	}
	if err := s.Delete(ctx, "a/x", blob.DeleteOptions{}); err == nil {
		t.Fatal("Delete(a/x) passed a matching rule")
	}
	remove()
	if _, _, err := s.Get(ctx, "a/x", blob.GetOptions{}); err != nil {
		t.Fatalf("Get(a/x) after removing the rule: %v", err)
	}
}

func TestInvalidNamesBypassFaults(t *testing.T) {
	s, ctx := newStore(t, 1, faultstore.WithRules(faultstore.Rule{Fault: faultstore.Fail}))
	if _, err := s.Put(ctx, "../x", nil, blob.PutOptions{}); !errors.Is(err, blob.ErrInvalidName) || errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Put(../x) under a Fail rule: %v, want only ErrInvalidName", err)
	}
	if _, err := s.List(ctx, blob.ListOptions{Prefix: "/"}); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("List(/): %v", err)
	}
	if s.Injected(faultstore.OpPut) != 0 {
		t.Fatal("a fault was counted for an invalid name")
	}
}

func TestDelayUsesInjectedSleep(t *testing.T) {
	var mu sync.Mutex
	var slept []time.Duration
	sleep := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		slept = append(slept, d)
		mu.Unlock()
		return ctx.Err()
	}
	s, ctx := newStore(t, 1, faultstore.WithSleep(sleep), faultstore.WithRules(
		faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Delay, Delay: time.Hour},
		faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Delay, Delay: time.Minute, Count: 1},
	))
	start := time.Now()
	for range 2 {
		if _, err := s.Put(ctx, "x", []byte("x"), blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("the injected sleep was not used")
	}
	if fmt.Sprint(slept) != "[1h1m0s 1h0m0s]" {
		t.Fatalf("slept %v, want [1h1m0s 1h0m0s]", slept)
	}
	// A context that ends during the delay stops the call before the store.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, "y", []byte("y"), blob.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context during a delay: %v", err)
	}
	if _, err := s.Inner().Head(ctx, "y"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the delayed, canceled put reached the store: %v", err)
	}
}

func TestDelayRealSleep(t *testing.T) {
	s, ctx := newStore(t, 1, faultstore.WithRules(faultstore.Rule{Fault: faultstore.Delay, Delay: 30 * time.Millisecond}))
	start := time.Now()
	if _, err := s.Head(ctx, "x"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Head: %v", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("Head returned after %v, want at least 30ms", d)
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	s.Clear()
	s.Add(faultstore.Rule{Fault: faultstore.Delay, Delay: time.Hour})
	if _, err := s.Head(tctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Head with a deadline during a 1h delay: %v", err)
	}
}

func TestHang(t *testing.T) {
	s, ctx := newStore(t, 1, faultstore.WithRules(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.Hang, Count: 1}))
	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	deadline, _ := tctx.Deadline()
	_, err := s.Put(tctx, "x", []byte("x"), blob.PutOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put under Hang: %v, want DeadlineExceeded", err)
	}
	// Against the deadline itself: a clock read after WithTimeout set it
	// would make the wait look up to a scheduling delay short.
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("Hang returned %v before the deadline", deadline.Sub(now))
	}
	if s.InnerCalls(faultstore.OpPut) != 0 {
		t.Fatal("a hung put reached the store")
	}
	if _, err := s.Put(ctx, "x", []byte("x"), blob.PutOptions{}); err != nil {
		t.Fatalf("the next Put (Count 1 used up): %v", err)
	}
}

// TestLostResponse: the write lands, the caller hears ErrOutcomeUnknown, and
// a retry with the same PutID succeeds with the same ETag: no false
// condition failure, no second write.
func TestLostResponse(t *testing.T) {
	s, ctx := newStore(t, 1)
	s.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.LoseResponse, Count: 1})
	opts := blob.PutOptions{IfNoneMatch: true, PutID: "gen-1"}
	a, err := s.Put(ctx, "g/1", []byte("batch"), opts)
	if !errors.Is(err, blob.ErrOutcomeUnknown) || errors.Is(err, blob.ErrConditionFailed) {
		t.Fatalf("Put with a lost response: %v, want ErrOutcomeUnknown", err)
	}
	if a != (blob.Attrs{}) {
		t.Fatalf("Put with a lost response returned attrs %+v", a)
	}
	h, err := s.Inner().Head(ctx, "g/1")
	if err != nil || h.PutID != "gen-1" {
		t.Fatalf("the write did not land: %+v, %v", h, err)
	}
	r, err := s.Put(ctx, "g/1", []byte("batch"), opts)
	if err != nil || r.ETag != h.ETag {
		t.Fatalf("retry = %+v, %v; want success with ETag %q", r, err, h.ETag)
	}
	if s.InnerCalls(faultstore.OpPut) != 2 || s.Injected(faultstore.OpPut) != 1 {
		t.Fatalf("inner puts %d, injected %d", s.InnerCalls(faultstore.OpPut), s.Injected(faultstore.OpPut))
	}

	// Reads and deletes.
	s.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet, faultstore.OpDelete}, Fault: faultstore.LoseResponse, Count: 2})
	if _, _, err := s.Get(ctx, "g/1", blob.GetOptions{}); !errors.Is(err, blob.ErrUnavailable) {
		t.Fatalf("Get with a lost response: %v, want ErrUnavailable", err)
	}
	if err := s.Delete(ctx, "g/1", blob.DeleteOptions{}); !errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Fatalf("Delete with a lost response: %v, want ErrOutcomeUnknown", err)
	}
	if _, err := s.Head(ctx, "g/1"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the delete did not land: %v", err)
	}
}

// TestCompetingWriterAfterLostResponse uses the After hook to let another
// writer CAS the blob between our landed write and our retry: the retry must
// then fail its condition (the shard layer re-reads and sees it was
// superseded) rather than claim a version that is no longer ours.
func TestCompetingWriterAfterLostResponse(t *testing.T) {
	s, ctx := newStore(t, 1)
	e0, err := s.Put(ctx, "manifest", []byte("v0"), blob.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var hookErr error
	var calls []faultstore.Call
	s.SetHooks(faultstore.Hooks{After: func(c faultstore.Call) {
		calls = append(calls, c)
		if c.Op != faultstore.OpPut || c.Fault != faultstore.LoseResponse {
			return
		}
		h, err := s.Head(ctx, c.Name) // re-entrant: hooks run outside the locks
		if err == nil {
			_, err = s.Inner().Put(ctx, c.Name, []byte("theirs"), blob.PutOptions{IfMatch: h.ETag, PutID: "them"})
		}
		hookErr = err
	}})
	s.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.LoseResponse, Count: 1})
	opts := blob.PutOptions{IfMatch: e0.ETag, PutID: "us"}
	if _, err := s.Put(ctx, "manifest", []byte("ours"), opts); !errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Fatalf("Put: %v", err)
	}
	if hookErr != nil {
		t.Fatalf("competing writer: %v", hookErr)
	}
	if _, err := s.Put(ctx, "manifest", []byte("ours"), opts); !errors.Is(err, blob.ErrConditionFailed) {
		t.Fatalf("retry after a competing write: %v, want ErrConditionFailed", err)
	}
	b, _, err := s.Get(ctx, "manifest", blob.GetOptions{})
	if err != nil || string(b) != "theirs" {
		t.Fatalf("manifest = %q, %v; want theirs", b, err)
	}
	if len(calls) < 3 || calls[0].Op != faultstore.OpPut || calls[0].Fault != faultstore.LoseResponse || calls[0].Err != nil {
		t.Fatalf("After saw %+v", calls)
	}
}

func TestBeforeHookSeesEveryCall(t *testing.T) {
	var seen []string
	s, ctx := newStore(t, 1, faultstore.WithHooks(faultstore.Hooks{Before: func(c faultstore.Call) {
		seen = append(seen, c.Op.String()+" "+c.Name)
	}}), faultstore.WithRules(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpHead}, Fault: faultstore.Fail}))
	_, _ = s.Put(ctx, "a", nil, blob.PutOptions{})
	_, _ = s.Head(ctx, "a")
	_, _ = s.List(ctx, blob.ListOptions{Prefix: "p/"})
	if fmt.Sprint(seen) != "[put a head a list p/]" {
		t.Fatalf("Before saw %q", seen)
	}
}

// TestConcurrent: rules, hooks and counters under -race.
func TestConcurrent(t *testing.T) {
	s, ctx := newStore(t, 3, faultstore.WithRules(
		faultstore.Rule{Fault: faultstore.Fail, Prob: 0.2},
		faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Fault: faultstore.LoseResponse, Prob: 0.2},
		faultstore.Rule{Fault: faultstore.Delay, Prob: 0.1, Delay: time.Microsecond},
	))
	var hooked sync.Map
	s.SetHooks(faultstore.Hooks{After: func(c faultstore.Call) { hooked.Store(c.Name, true) }})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := fmt.Sprintf("g%d/%d", g, i%10)
				var err error
				switch i % 4 {
				case 0:
					_, err = s.Put(ctx, n, []byte(n), blob.PutOptions{})
				case 1:
					_, _, err = s.Get(ctx, n, blob.GetOptions{})
				case 2:
					_, err = s.List(ctx, blob.ListOptions{Prefix: fmt.Sprintf("g%d/", g), Max: 3})
				case 3:
					err = s.Delete(ctx, n, blob.DeleteOptions{})
				}
				if err != nil && !errors.Is(err, blob.ErrUnavailable) && !errors.Is(err, blob.ErrOutcomeUnknown) && !errors.Is(err, blob.ErrNotFound) {
					t.Errorf("unexpected error %v", err)
				}
				if i == 100 && g == 0 {
					remove := s.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpHead}, Fault: faultstore.Fail})
					remove()
				}
			}
		}()
	}
	wg.Wait()
	var total, injected int64
	for _, op := range faultstore.Ops {
		total += s.Calls(op)
		injected += s.Injected(op)
	}
	if total != 8*200 || injected == 0 {
		t.Fatalf("calls %d (want 1600), injected %d", total, injected)
	}
}
