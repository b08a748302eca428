package faultstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
)

var puts = []faultstore.Op{faultstore.OpPut}

// putAll puts each name from its own goroutine and returns their errors,
// by name, once all returned.
func putAll(ctx context.Context, s blob.Store, names ...string) <-chan map[string]error {
	return putAllWith(ctx, s, blob.PutOptions{}, names...)
}

func putAllWith(ctx context.Context, s blob.Store, opts blob.PutOptions, names ...string) <-chan map[string]error {
	out := make(chan map[string]error, 1)
	var mu sync.Mutex
	errs := map[string]error{}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() {
			_, err := s.Put(ctx, n, []byte(n), opts)
			mu.Lock()
			errs[n] = err
			mu.Unlock()
		})
	}
	go func() {
		wg.Wait()
		out <- errs
	}()
	return out
}

func exists(t *testing.T, s blob.Store, name string) bool {
	t.Helper()
	_, err := s.Head(t.Context(), name)
	if err != nil && !errors.Is(err, blob.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A gate holds the calls it selects, unsent, reports each once, and lets
// them all through on Release; later calls pass.
func TestHoldRelease(t *testing.T) {
	s, ctx := newStore(t, 1)
	g := s.Hold(faultstore.Match{Ops: puts, Prefix: "held/"})
	done := putAll(ctx, s, "held/a", "held/b", "free")
	seen := map[string]bool{}
	for range 2 {
		c, err := g.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen[c.Name] = true
	}
	<-g.Reached()
	if !seen["held/a"] || !seen["held/b"] || g.Held() != 2 {
		t.Fatalf("held %v (%d), want held/a and held/b", seen, g.Held())
	}
	for g.Holding() != 2 {
		time.Sleep(time.Millisecond)
	}
	if exists(t, s.Inner(), "held/a") || exists(t, s.Inner(), "held/b") {
		t.Fatal("a held put reached the store")
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := g.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing more held: %v", err)
	}
	g.Release()
	g.Release()
	for n, err := range <-done {
		if err != nil || !exists(t, s.Inner(), n) {
			t.Errorf("%s: %v, or not stored", n, err)
		}
	}
	if g.Holding() != 0 {
		t.Errorf("%d calls still held after Release", g.Holding())
	}
	if _, err := s.Put(ctx, "held/c", nil, blob.PutOptions{}); err != nil || g.Held() != 2 {
		t.Errorf("a put after Release: %v, held %d", err, g.Held())
	}
}

// Skip and Count pick the Nth matching call; If sees the call's options.
func TestHoldNth(t *testing.T) {
	s, ctx := newStore(t, 1)
	g := s.Hold(faultstore.Match{Ops: puts, Suffix: "/m", Skip: 1, Count: 1,
		If: func(c faultstore.Call) bool { return c.PutOpts.IfNoneMatch }})
	create := blob.PutOptions{IfNoneMatch: true}
	for _, n := range []string{"1/m", "2/x"} {
		if _, err := s.Put(ctx, n, nil, create); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Put(ctx, "4/m", nil, blob.PutOptions{}); err != nil { // not a create
		t.Fatal(err)
	}
	done := putAllWith(ctx, s, create, "5/m")
	if c, err := g.Wait(ctx); err != nil || c.Name != "5/m" || string(c.Data) != "5/m" {
		t.Fatalf("held %+v, %v; want the second create of an .../m", c, err)
	}
	if _, err := s.Put(ctx, "6/m", nil, create); err != nil { // Count is spent
		t.Fatal(err)
	}
	g.Release()
	if err := (<-done)["5/m"]; err != nil {
		t.Fatal(err)
	}
}

// Fail ends the held calls, unapplied, with its error, and retires the
// gate; the first of Release and Fail wins.
func TestHoldFail(t *testing.T) {
	s, ctx := newStore(t, 1)
	g := s.Hold(faultstore.Match{Ops: puts})
	done := putAll(ctx, s, "a", "b")
	for range 2 {
		if _, err := g.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g.Fail(blob.ErrConditionFailed)
	g.Release()
	for n, err := range <-done {
		if !errors.Is(err, blob.ErrConditionFailed) || exists(t, s.Inner(), n) {
			t.Errorf("%s: %v, want ErrConditionFailed and no blob", n, err)
		}
	}
	if s.Injected(faultstore.OpPut) != 2 || s.InnerCalls(faultstore.OpPut) != 0 {
		t.Errorf("injected %d, forwarded %d", s.Injected(faultstore.OpPut), s.InnerCalls(faultstore.OpPut))
	}
	if _, err := s.Put(ctx, "c", nil, blob.PutOptions{}); err != nil {
		t.Errorf("a put after Fail: %v", err)
	}

	g = s.Hold(faultstore.Match{Ops: puts})
	g.Fail(nil)
	g = s.Hold(faultstore.Match{Ops: puts})
	done = putAll(ctx, s, "d")
	if _, err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	g.Fail(nil)
	if err := (<-done)["d"]; !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Fail(nil): %v, want ErrUnavailable", err)
	}
}

// A held call whose context ends returns at once, unapplied; the gate goes
// on holding others. goleak (TestMain) checks no held goroutine is left.
func TestHoldContextEnds(t *testing.T) {
	s, ctx := newStore(t, 1)
	g := s.Hold(faultstore.Match{Ops: puts})
	cctx, cancel := context.WithCancel(ctx)
	done := putAll(cctx, s, "a")
	if _, err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := (<-done)["a"]; !errors.Is(err, context.Canceled) || exists(t, s.Inner(), "a") {
		t.Fatalf("a: %v, want Canceled and no blob", err)
	}
	if g.Holding() != 0 {
		t.Fatalf("%d held after the context ended", g.Holding())
	}
	done = putAll(ctx, s, "b")
	if c, err := g.Wait(ctx); err != nil || c.Name != "b" {
		t.Fatalf("held %q, %v", c.Name, err)
	}
	g.Release()
	if err := (<-done)["b"]; err != nil {
		t.Fatal(err)
	}
}

// A deaf gate holds a call past its context's end, until Fail ends it;
// goleak (TestMain) checks it is not left behind.
func TestHoldDeaf(t *testing.T) {
	s, ctx := newStore(t, 1)
	g := s.Hold(faultstore.Match{Ops: puts}, faultstore.Deaf)
	cctx, cancel := context.WithCancel(ctx)
	done := putAll(cctx, s, "a")
	if _, err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case errs := <-done:
		t.Fatalf("a deaf held call returned when its context ended: %v", errs)
	case <-time.After(20 * time.Millisecond):
	}
	g.Fail(blob.ErrConditionFailed)
	if err := (<-done)["a"]; !errors.Is(err, blob.ErrConditionFailed) || exists(t, s.Inner(), "a") {
		t.Fatalf("a: %v, want ErrConditionFailed and no blob", err)
	}
}

// Count counts what it selects as it arrives, faults or not.
func TestCount(t *testing.T) {
	s, ctx := newStore(t, 1)
	all := s.Count(faultstore.Match{})
	reads := s.Count(faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet, faultstore.OpHead}})
	ranged := s.Count(faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet},
		If: func(c faultstore.Call) bool { return c.GetOpts.Length > 0 }})
	s.Fail(faultstore.Match{Ops: puts, Prefix: "bad"}, blob.ErrUnavailable)
	_, _ = s.Put(ctx, "bad", nil, blob.PutOptions{})
	_, _ = s.Put(ctx, "x", []byte("xx"), blob.PutOptions{})
	_, _, _ = s.Get(ctx, "x", blob.GetOptions{})
	_, _, _ = s.Get(ctx, "x", blob.GetOptions{Offset: 1, Length: 1})
	_, _ = s.Head(ctx, "x")
	if all.N() != 5 || reads.N() != 3 || ranged.N() != 1 {
		t.Errorf("counted all %d, reads %d, ranged %d; want 5, 3, 1", all.N(), reads.N(), ranged.N())
	}
}

// Fail and Intercept inject on a predicate, in order; a panic reaches the
// caller; removing an interceptor ends it.
func TestIntercept(t *testing.T) {
	s, ctx := newStore(t, 1)
	disk := errors.New("disk on fire")
	remove := s.Fail(faultstore.Match{Ops: puts, Suffix: "/m"}, disk)
	var order []string
	s.Intercept(faultstore.Match{Ops: puts}, func(_ context.Context, c faultstore.Call) error {
		order = append(order, c.Name)
		return nil
	})
	if _, err := s.Put(ctx, "a/m", nil, blob.PutOptions{}); !errors.Is(err, disk) || exists(t, s.Inner(), "a/m") {
		t.Fatalf("Put a/m: %v", err)
	}
	if _, err := s.Put(ctx, "a/x", nil, blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	remove()
	if _, err := s.Put(ctx, "b/m", nil, blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[a/x b/m]" {
		t.Errorf("later interceptor saw %v, want [a/x b/m]", order)
	}
	s.Intercept(faultstore.Match{Ops: []faultstore.Op{faultstore.OpDelete}}, func(context.Context, faultstore.Call) error {
		panic("injected")
	})
	defer func() {
		if recover() != "injected" {
			t.Error("the interceptor's panic did not reach the caller")
		}
	}()
	_ = s.Delete(ctx, "a/x", blob.DeleteOptions{})
}

// OnLanded runs after the inner store answered, with its error, before the
// caller gets the result; not for calls kept from the store.
func TestOnLanded(t *testing.T) {
	s, ctx := newStore(t, 1)
	var got []string
	s.OnLanded(faultstore.Match{Ops: puts, Skip: 1}, func(c faultstore.Call) {
		if !exists(t, s.Inner(), c.Name) && c.Err == nil {
			t.Errorf("%s: ran before the put landed", c.Name)
		}
		got = append(got, fmt.Sprintf("%s:%v", c.Name, errors.Is(c.Err, blob.ErrConditionFailed)))
	})
	s.Fail(faultstore.Match{Ops: puts, Prefix: "bad"}, blob.ErrUnavailable)
	for _, n := range []string{"a", "b", "bad", "b"} {
		_, _ = s.Put(ctx, n, nil, blob.PutOptions{IfNoneMatch: true})
	}
	if fmt.Sprint(got) != "[b:false b:true]" {
		t.Errorf("landed %v, want [b:false b:true]", got)
	}
}

// A landed listing tells what it was asked and what it answered.
func TestOnLandedList(t *testing.T) {
	s, ctx := newStore(t, 1)
	for _, n := range []string{"d/a", "d/b", "d/e/f"} {
		if _, err := s.Put(ctx, n, nil, blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	s.OnLanded(faultstore.Match{Ops: []faultstore.Op{faultstore.OpList}}, func(c faultstore.Call) {
		got = append(got, fmt.Sprintf("%s|%s|%v|%t", c.Name, c.Token, c.Listed, c.Next != ""))
	})
	p, err := s.List(ctx, blob.ListOptions{Prefix: "d/", Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, blob.ListOptions{Prefix: "d/", Token: p.Next}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, blob.ListOptions{Prefix: "d/", Delimiter: "/"}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[d/||[d/a]|true d/|%s|[d/b d/e/f]|false d/||[d/a d/b d/e/]|false]", p.Next)
	if fmt.Sprint(got) != want {
		t.Errorf("landed %v, want %s", got, want)
	}
}

// AnswerGet serves the Gets it selects without the inner store, and lets
// the rest through; OnLanded sees the answered ones as landed.
func TestAnswerGet(t *testing.T) {
	s, ctx := newStore(t, 1)
	if _, err := s.Put(ctx, "a/_manifest", []byte("new"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var landed []string
	s.OnLanded(faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet}}, func(c faultstore.Call) { landed = append(landed, c.Name) })
	s.AnswerGet(faultstore.Match{Suffix: "/_manifest", Count: 2}, func(c faultstore.Call) ([]byte, blob.Attrs, error) {
		return []byte("old"), blob.Attrs{Name: c.Name, ETag: "old"}, nil
	})
	var got []string
	for range 3 {
		data, a, err := s.Get(ctx, "a/_manifest", blob.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(data)+"/"+fmt.Sprint(a.ETag == "old"))
	}
	if want := "[old/true old/true new/false]"; fmt.Sprint(got) != want {
		t.Errorf("Gets: %v, want %s (two answered, then the store's)", got, want)
	}
	if len(landed) != 3 {
		t.Errorf("OnLanded saw %v, want all three", landed)
	}
	fail := errors.New("boom")
	remove := s.AnswerGet(faultstore.Match{Prefix: "b/"}, func(faultstore.Call) ([]byte, blob.Attrs, error) { return nil, blob.Attrs{}, fail })
	if _, _, err := s.Get(ctx, "b/x", blob.GetOptions{}); !errors.Is(err, fail) {
		t.Errorf("answered error: %v, want %v", err, fail)
	}
	remove()
	if _, _, err := s.Get(ctx, "b/x", blob.GetOptions{}); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Get after remove: %v, want the store's ErrNotFound", err)
	}
}

// With LandsLate, a held put whose sender gives up answers
// ErrOutcomeUnknown, and lands when the gate is released, before Release
// returns; a failed gate drops it.
func TestHoldLandsLate(t *testing.T) {
	for _, release := range []bool{true, false} {
		s, ctx := newStore(t, 1)
		g := s.Hold(faultstore.Match{Ops: puts}, faultstore.LandsLate)
		pctx, cancel := context.WithCancel(ctx)
		done := putAll(pctx, s, "late")
		if _, err := g.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := (<-done)["late"]; !errors.Is(err, blob.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
			t.Fatalf("the put whose sender gave up: %v, want ErrOutcomeUnknown", err)
		}
		if _, err := s.Head(ctx, "late"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("before the release: %v, want not landed", err)
		}
		if release {
			g.Release()
		} else {
			g.Fail(nil)
		}
		data, _, err := s.Get(ctx, "late", blob.GetOptions{})
		if release && (err != nil || string(data) != "late") {
			t.Errorf("after Release: %q, %v; want it landed", data, err)
		}
		if !release && !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("after Fail: %q, %v; want it dropped", data, err)
		}
	}
}
