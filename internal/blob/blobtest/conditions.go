package blobtest

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob"
)

func testCreateOnly(e *env) {
	n := e.name("create")
	a := e.put(n, []byte("first"), blob.PutOptions{IfNoneMatch: true})
	_, err := e.s.Put(e.ctx, n, []byte("second"), blob.PutOptions{IfNoneMatch: true})
	wantErr(e.t, err, blob.ErrConditionFailed, "second create-only Put")
	e.expect(n, []byte("first"), a.ETag)
}

func testCompareAndSwap(e *env) {
	n := e.name("cas")
	a0 := e.put(n, []byte("v0"), blob.PutOptions{IfNoneMatch: true})
	a1 := e.put(n, []byte("v1"), blob.PutOptions{IfMatch: a0.ETag})
	if a1.ETag == a0.ETag {
		e.t.Fatalf("CAS returned the old ETag %q", a1.ETag)
	}
	e.expect(n, []byte("v1"), a1.ETag)

	_, err := e.s.Put(e.ctx, n, []byte("stale"), blob.PutOptions{IfMatch: a0.ETag})
	wantErr(e.t, err, blob.ErrConditionFailed, "CAS with a stale ETag")
	e.expect(n, []byte("v1"), a1.ETag)

	a2 := e.put(n, []byte("v2"), blob.PutOptions{IfMatch: a1.ETag})
	e.expect(n, []byte("v2"), a2.ETag)
}

func testCompareAndSwapMissing(e *env) {
	n := e.name("cas-missing")
	other := e.put(e.name("other"), []byte("x"), blob.PutOptions{})
	for _, tag := range []blob.ETag{other.ETag, `"0x8DC0000000000000"`, "made-up"} {
		_, err := e.s.Put(e.ctx, n, []byte("v"), blob.PutOptions{IfMatch: tag})
		wantErr(e.t, err, blob.ErrConditionFailed, "CAS on a missing blob with ETag %q", tag)
	}
	e.expectMissing(n)

	// Deleted and re-created: the old ETag must not match the new version.
	a0 := e.put(n, []byte("same"), blob.PutOptions{})
	if err := e.s.Delete(e.ctx, n, blob.DeleteOptions{}); err != nil {
		e.t.Fatalf("Delete: %v", err)
	}
	_, err := e.s.Put(e.ctx, n, []byte("v"), blob.PutOptions{IfMatch: a0.ETag})
	wantErr(e.t, err, blob.ErrConditionFailed, "CAS on a deleted blob")
	e.expectMissing(n)
	a1 := e.put(n, []byte("same"), blob.PutOptions{IfNoneMatch: true})
	if a1.ETag == a0.ETag {
		e.t.Fatalf("re-created blob reuses ETag %q", a1.ETag)
	}
	_, err = e.s.Put(e.ctx, n, []byte("v"), blob.PutOptions{IfMatch: a0.ETag})
	wantErr(e.t, err, blob.ErrConditionFailed, "CAS with the ETag of a deleted version")
	e.expect(n, []byte("same"), a1.ETag)
}

func testUnconditionalOverwrite(e *env) {
	n := e.name("overwrite")
	a0 := e.put(n, []byte("v0"), blob.PutOptions{})
	a1 := e.put(n, []byte("v1-longer"), blob.PutOptions{})
	if a1.ETag == a0.ETag {
		e.t.Fatalf("overwrite kept ETag %q", a0.ETag)
	}
	e.expect(n, []byte("v1-longer"), a1.ETag)
	a2 := e.put(n, []byte{}, blob.PutOptions{})
	e.expect(n, []byte{}, a2.ETag)
}

type result struct {
	attrs blob.Attrs
	err   error
}

// race runs Racers concurrent puts released at the same instant.
func race(put func(i int) (blob.Attrs, error)) []result {
	res := make([]result, Racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range Racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a, err := put(i)
			res[i] = result{a, err}
		}()
	}
	close(start)
	wg.Wait()
	return res
}

// oneWinner checks that exactly one racer won and every other one lost its
// condition, and returns the winner's index.
func oneWinner(t *testing.T, what string, res []result) int {
	t.Helper()
	winner := -1
	for i, r := range res {
		if r.err == nil {
			if winner >= 0 {
				t.Fatalf("%s: racers %d and %d both won (ETags %q, %q)", what, winner, i, res[winner].attrs.ETag, r.attrs.ETag)
			}
			winner = i
			continue
		}
		wantErr(t, r.err, blob.ErrConditionFailed, "%s: racer %d", what, i)
	}
	if winner < 0 {
		t.Fatalf("%s: no racer won", what)
	}
	return winner
}

func testRacingCompareAndSwap(e *env) {
	n := e.name("race-cas")
	cur := e.put(n, []byte("start"), blob.PutOptions{IfNoneMatch: true})
	const rounds = 5
	for round := range rounds {
		data := func(i int) []byte { return []byte(fmt.Sprintf("round %d racer %d", round, i)) }
		res := race(func(i int) (blob.Attrs, error) {
			opts := blob.PutOptions{IfMatch: cur.ETag}
			if round%2 == 0 { // alternate: with and without idempotency keys
				opts.PutID = fmt.Sprintf("r%d-%d", round, i)
			}
			return e.s.Put(e.ctx, n, data(i), opts)
		})
		w := oneWinner(e.t, fmt.Sprintf("CAS round %d", round), res)
		e.expect(n, data(w), res[w].attrs.ETag)
		if res[w].attrs.ETag == cur.ETag {
			e.t.Fatalf("round %d: winner kept ETag %q", round, cur.ETag)
		}
		cur = res[w].attrs
	}
}

func testRacingCreateOnly(e *env) {
	for round := range 3 {
		n := e.name(fmt.Sprintf("race-create-%d", round))
		data := func(i int) []byte { return []byte(fmt.Sprintf("racer %d", i)) }
		res := race(func(i int) (blob.Attrs, error) {
			opts := blob.PutOptions{IfNoneMatch: true}
			if round != 0 {
				opts.PutID = fmt.Sprintf("c%d-%d", round, i)
			}
			return e.s.Put(e.ctx, n, data(i), opts)
		})
		w := oneWinner(e.t, fmt.Sprintf("create-only round %d", round), res)
		e.expect(n, data(w), res[w].attrs.ETag)
	}
}

// testRacingDistinctNames writes and deletes many names in shared and nested
// "directories" concurrently; none of it conflicts, so all of it succeeds.
func testRacingDistinctNames(e *env) {
	const perRacer = 6
	errs := make([]error, Racers)
	var wg sync.WaitGroup
	for i := range Racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perRacer {
				keep := e.name(fmt.Sprintf("d/%d/k%d", j%2, i*perRacer+j))
				tmp := e.name(fmt.Sprintf("d/%d/t%d/x/y", j%3, i*perRacer+j))
				for _, n := range []string{keep, tmp} {
					if _, err := e.s.Put(e.ctx, n, []byte(n), blob.PutOptions{IfNoneMatch: true}); err != nil {
						errs[i] = fmt.Errorf("Put(%q): %w", n, err)
						return
					}
				}
				if err := e.s.Delete(e.ctx, tmp, blob.DeleteOptions{}); err != nil {
					errs[i] = fmt.Errorf("Delete(%q): %w", tmp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			e.t.Fatal(err)
		}
	}
	var want []string
	for i := range Racers * perRacer {
		want = append(want, e.name(fmt.Sprintf("d/%d/k%d", i%perRacer%2, i)))
	}
	sort.Strings(want)
	got := names(e.list(e.pfx, 0))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("after racing writes, List = %q, want %q", got, want)
	}
}

func testIdempotentCreateOnly(e *env) {
	n := e.name("idem-create")
	opts := blob.PutOptions{IfNoneMatch: true, PutID: "x"}
	a := e.put(n, []byte("payload"), opts)
	// The retry after a lost response: same call, same PutID.
	for i := range 2 {
		r, err := e.s.Put(e.ctx, n, []byte("payload"), opts)
		if err != nil {
			e.t.Fatalf("retry %d of a create-only put with the same PutID: %v, want success", i, err)
		}
		if r.ETag != a.ETag || r.PutID != "x" {
			e.t.Fatalf("retry %d returned %+v, want the first attempt's ETag %q and PutID x", i, r, a.ETag)
		}
	}
	e.expect(n, []byte("payload"), a.ETag) // no second write
	if h := e.head(n); h.PutID != "x" {
		e.t.Fatalf("Head PutID = %q, want x", h.PutID)
	}
	// A different logical write loses, with or without a PutID.
	for _, id := range []string{"other", ""} {
		_, err := e.s.Put(e.ctx, n, []byte("payload"), blob.PutOptions{IfNoneMatch: true, PutID: id})
		wantErr(e.t, err, blob.ErrConditionFailed, "create-only put with PutID %q", id)
	}
	e.expect(n, []byte("payload"), a.ETag)
}

func testIdempotentCompareAndSwap(e *env) {
	n := e.name("idem-cas")
	e0 := e.put(n, []byte("v0"), blob.PutOptions{IfNoneMatch: true, PutID: "w"})
	opts := blob.PutOptions{IfMatch: e0.ETag, PutID: "y"}
	e1 := e.put(n, []byte("v1"), opts)
	for i := range 2 {
		r, err := e.s.Put(e.ctx, n, []byte("v1"), opts)
		if err != nil {
			e.t.Fatalf("retry %d of a CAS put with the same PutID: %v, want success", i, err)
		}
		if r.ETag != e1.ETag {
			e.t.Fatalf("retry %d returned ETag %q, want the first attempt's %q", i, r.ETag, e1.ETag)
		}
	}
	e.expect(n, []byte("v1"), e1.ETag)
	if h := e.head(n); h.PutID != "y" {
		e.t.Fatalf("Head PutID = %q, want y", h.PutID)
	}
	// The same stale retry under another PutID is a genuine loss.
	for _, id := range []string{"y2", "w", ""} {
		_, err := e.s.Put(e.ctx, n, []byte("v1"), blob.PutOptions{IfMatch: e0.ETag, PutID: id})
		wantErr(e.t, err, blob.ErrConditionFailed, "stale CAS with PutID %q", id)
	}
	// Once someone else wrote over it, the retry is a loss too: the version
	// it would claim is gone.
	e2 := e.put(n, []byte("v2"), blob.PutOptions{IfMatch: e1.ETag, PutID: "z"})
	_, err := e.s.Put(e.ctx, n, []byte("v1"), opts)
	wantErr(e.t, err, blob.ErrConditionFailed, "retry after a competing write")
	e.expect(n, []byte("v2"), e2.ETag)
	// A matching PutID never turns a passing condition into a no-op.
	e3 := e.put(n, []byte("v3"), blob.PutOptions{IfMatch: e2.ETag, PutID: "z"})
	if e3.ETag == e2.ETag {
		e.t.Fatalf("CAS with a fresh ETag and the current version's PutID did not write")
	}
	e.expect(n, []byte("v3"), e3.ETag)
}
