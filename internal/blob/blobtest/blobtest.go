// Package blobtest is the conformance suite every blob.Store backend runs
// unchanged: the in-memory store, the local-disk store, the fault-injecting
// wrapper and Azure (against Azurite). A fake that passes it cannot drift
// from the real backends.
//
// Each subtest calls newStore once and works under its own random name
// prefix, so backends whose tests share one container (Azurite) may return
// the same store every time.
package blobtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Racers is the number of goroutines that race one conditional write.
const Racers = 8

// opTimeout bounds every subtest, so that a hanging backend fails instead
// of stalling the whole test binary.
const opTimeout = 60 * time.Second

// Run runs the conformance suite. newStore is called once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
			defer cancel()
			e := &env{t: t, ctx: ctx, s: newStore(t), pfx: uniquePrefix()}
			c.fn(e)
		})
	}
}

var cases = []struct {
	name string
	fn   func(*env)
}{
	{"CreateOnly", testCreateOnly},
	{"CompareAndSwap", testCompareAndSwap},
	{"CompareAndSwapMissing", testCompareAndSwapMissing},
	{"UnconditionalOverwrite", testUnconditionalOverwrite},
	{"RacingCompareAndSwap", testRacingCompareAndSwap},
	{"RacingCreateOnly", testRacingCreateOnly},
	{"RacingDistinctNames", testRacingDistinctNames},
	{"GetWhole", testGetWhole},
	{"GetRange", testGetRange},
	{"GetRangeEmptyBlob", testGetRangeEmptyBlob},
	{"GetIfNoneMatch", testGetIfNoneMatch},
	{"Head", testHead},
	{"NotFound", testNotFound},
	{"UniqueETags", testUniqueETags},
	{"ListOrder", testListOrder},
	{"ListPagination", testListPagination},
	{"ListPrefix", testListPrefix},
	{"ListAll", testListAll},
	{"ListDelimited", testListDelimited},
	{"ListDelimitedPagination", testListDelimitedPagination},
	{"ListDelimitedStartAfter", testListDelimitedStartAfter},
	{"ListDelimitedManyPrefixes", testListDelimitedManyPrefixes},
	{"ListDelimitedDeleted", testListDelimitedDeleted},
	{"Delete", testDelete},
	{"DeleteMissing", testDeleteMissing},
	{"DeleteConditional", testDeleteConditional},
	{"InvalidNames", testInvalidNames},
	{"ValidNames", testValidNames},
	{"NameAndChildCoexist", testNameAndChildCoexist},
	{"IdempotentCreateOnly", testIdempotentCreateOnly},
	{"IdempotentCompareAndSwap", testIdempotentCompareAndSwap},
	{"CanceledContext", testCanceledContext},
	{"NoAliasing", testNoAliasing},
}

// uniquePrefix returns a fresh, valid name prefix ending in "/".
func uniquePrefix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "blobtest-" + hex.EncodeToString(b[:]) + "/"
}

type env struct {
	t   *testing.T
	ctx context.Context
	s   blob.Store
	pfx string
}

func (e *env) name(suffix string) string { return e.pfx + suffix }

func (e *env) put(name string, data []byte, opts blob.PutOptions) blob.Attrs {
	e.t.Helper()
	a, err := e.s.Put(e.ctx, name, data, opts)
	if err != nil {
		e.t.Fatalf("Put(%q, %+v): %v", name, opts, err)
	}
	if a.ETag == "" {
		e.t.Fatalf("Put(%q): empty ETag in %+v", name, a)
	}
	if a.Name != name || a.Size != int64(len(data)) || a.PutID != opts.PutID {
		e.t.Fatalf("Put(%q, %d bytes, PutID %q) returned attrs %+v", name, len(data), opts.PutID, a)
	}
	return a
}

func (e *env) get(name string, opts blob.GetOptions) ([]byte, blob.Attrs) {
	e.t.Helper()
	b, a, err := e.s.Get(e.ctx, name, opts)
	if err != nil {
		e.t.Fatalf("Get(%q, %+v): %v", name, opts, err)
	}
	return b, a
}

func (e *env) head(name string) blob.Attrs {
	e.t.Helper()
	a, err := e.s.Head(e.ctx, name)
	if err != nil {
		e.t.Fatalf("Head(%q): %v", name, err)
	}
	return a
}

// expect checks that the blob holds data under etag.
func (e *env) expect(name string, data []byte, etag blob.ETag) {
	e.t.Helper()
	got, a := e.get(name, blob.GetOptions{})
	if !bytes.Equal(got, data) {
		e.t.Fatalf("Get(%q) = %q, want %q", name, trunc(got), trunc(data))
	}
	if a.ETag != etag {
		e.t.Fatalf("Get(%q) ETag = %q, want %q", name, a.ETag, etag)
	}
	h := e.head(name)
	if h.ETag != etag || h.Size != int64(len(data)) {
		e.t.Fatalf("Head(%q) = %+v, want ETag %q size %d", name, h, etag, len(data))
	}
}

func (e *env) expectMissing(name string) {
	e.t.Helper()
	_, err := e.s.Head(e.ctx, name)
	wantErr(e.t, err, blob.ErrNotFound, "Head(%q)", name)
	_, _, err = e.s.Get(e.ctx, name, blob.GetOptions{})
	wantErr(e.t, err, blob.ErrNotFound, "Get(%q)", name)
}

// list follows a prefix listing to its end with pages of at most max items.
func (e *env) list(prefix string, max int) []blob.Attrs {
	e.t.Helper()
	var all []blob.Attrs
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			e.t.Fatalf("List(%q, max %d): more than 10000 pages; the token does not advance", prefix, max)
		}
		p, err := e.s.List(e.ctx, prefix, token, max)
		if err != nil {
			e.t.Fatalf("List(%q, %q, %d): %v", prefix, token, max, err)
		}
		if max > 0 && len(p.Items) > max {
			e.t.Fatalf("List(%q, %q, %d) returned %d items", prefix, token, max, len(p.Items))
		}
		all = append(all, p.Items...)
		if p.Next == "" {
			return all
		}
		if p.Next == token {
			e.t.Fatalf("List(%q): token %q did not advance", prefix, token)
		}
		token = p.Next
	}
}

func names(as []blob.Attrs) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Name
	}
	return out
}

// classes are blob's error classes; an error must match exactly one.
var classes = []error{
	blob.ErrNotFound, blob.ErrConditionFailed, blob.ErrNotModified, blob.ErrUnavailable,
	blob.ErrOutcomeUnknown, blob.ErrInvalidName, blob.ErrClosed, blob.ErrStoreFailed,
	blob.ErrNoSpace,
}

// wantErr fails the test unless err matches want and no other class.
func wantErr(t *testing.T, err, want error, format string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
	for _, c := range classes {
		if c != want && errors.Is(err, c) {
			t.Fatalf("%s: error %v matches %v as well as %v", what, err, c, want)
		}
	}
}

func trunc(b []byte) []byte {
	if len(b) > 64 {
		return append(append([]byte{}, b[:64]...), "..."...)
	}
	return b
}

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

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

func testGetWhole(e *env) {
	for _, size := range []int{0, 1, 100, 64 << 10, 1<<20 + 3} {
		n := e.name(fmt.Sprintf("whole-%d", size))
		data := pattern(size)
		a := e.put(n, data, blob.PutOptions{})
		got, ga := e.get(n, blob.GetOptions{})
		if !bytes.Equal(got, data) {
			e.t.Fatalf("Get(%q) returned %d bytes, want %d (or different content)", n, len(got), size)
		}
		if ga.Size != int64(size) || ga.ETag != a.ETag || ga.Name != n {
			e.t.Fatalf("Get(%q) attrs %+v, want size %d ETag %q", n, ga, size, a.ETag)
		}
	}
}

func testGetRange(e *env) {
	n := e.name("range")
	data := pattern(100)
	a := e.put(n, data, blob.PutOptions{})
	for _, c := range []struct {
		off, length int64
		want        []byte
	}{
		{0, 0, data},
		{0, 10, data[:10]},
		{10, 0, data[10:]},
		{50, 50, data[50:]},
		{95, 10, data[95:]},
		{99, 1, data[99:]},
		{0, 1000, data},
		{0, 100, data},
		{100, 0, nil},
		{100, 5, nil},
		{150, 10, nil},
		{1 << 40, 0, nil},
	} {
		got, ga := e.get(n, blob.GetOptions{Offset: c.off, Length: c.length})
		if !bytes.Equal(got, c.want) {
			e.t.Errorf("Get(%q, offset %d, length %d) = %q, want %q", n, c.off, c.length, got, c.want)
		}
		if ga.Size != 100 || ga.ETag != a.ETag {
			e.t.Errorf("Get(%q, offset %d, length %d) attrs %+v: want the whole blob's size 100 and ETag %q",
				n, c.off, c.length, ga, a.ETag)
		}
	}
	_, _, err := e.s.Get(e.ctx, e.name("range-missing"), blob.GetOptions{Offset: 10, Length: 10})
	wantErr(e.t, err, blob.ErrNotFound, "ranged Get of a missing blob")
}

func testGetRangeEmptyBlob(e *env) {
	n := e.name("range-empty")
	a := e.put(n, nil, blob.PutOptions{})
	for _, r := range [][2]int64{{0, 0}, {0, 10}, {5, 0}, {5, 5}} {
		got, ga := e.get(n, blob.GetOptions{Offset: r[0], Length: r[1]})
		if len(got) != 0 {
			e.t.Errorf("Get(empty blob, %d, %d) = %q, want nothing", r[0], r[1], got)
		}
		if ga.Size != 0 || ga.ETag != a.ETag {
			e.t.Errorf("Get(empty blob, %d, %d) attrs %+v, want size 0 ETag %q", r[0], r[1], ga, a.ETag)
		}
	}
}

func testGetIfNoneMatch(e *env) {
	n := e.name("inm")
	a0 := e.put(n, []byte("v0"), blob.PutOptions{})
	_, _, err := e.s.Get(e.ctx, n, blob.GetOptions{IfNoneMatch: a0.ETag})
	wantErr(e.t, err, blob.ErrNotModified, "Get with IfNoneMatch = current ETag")

	a1 := e.put(n, []byte("v1"), blob.PutOptions{})
	got, ga := e.get(n, blob.GetOptions{IfNoneMatch: a0.ETag})
	if string(got) != "v1" || ga.ETag != a1.ETag {
		e.t.Fatalf("Get with a stale IfNoneMatch = %q %+v, want v1 with ETag %q", got, ga, a1.ETag)
	}
	_, _, err = e.s.Get(e.ctx, n, blob.GetOptions{IfNoneMatch: a1.ETag})
	wantErr(e.t, err, blob.ErrNotModified, "Get with IfNoneMatch = new ETag")
	_, _, err = e.s.Get(e.ctx, n, blob.GetOptions{IfNoneMatch: a1.ETag, Offset: 1, Length: 1})
	wantErr(e.t, err, blob.ErrNotModified, "ranged Get with IfNoneMatch = new ETag")

	_, _, err = e.s.Get(e.ctx, e.name("inm-missing"), blob.GetOptions{IfNoneMatch: a1.ETag})
	wantErr(e.t, err, blob.ErrNotFound, "Get with IfNoneMatch of a missing blob")
}

func testHead(e *env) {
	n := e.name("head")
	before := time.Now()
	a := e.put(n, pattern(1234), blob.PutOptions{PutID: "head-put"})
	h := e.head(n)
	if h.Name != n || h.Size != 1234 || h.ETag != a.ETag || h.PutID != "head-put" {
		e.t.Fatalf("Head = %+v, want name %q size 1234 ETag %q PutID head-put", h, n, a.ETag)
	}
	// Clocks may differ between the test and a remote store; allow slack.
	if h.LastModified.IsZero() || h.LastModified.Before(before.Add(-time.Hour)) || h.LastModified.After(time.Now().Add(time.Hour)) {
		e.t.Fatalf("Head LastModified = %v, want about %v", h.LastModified, before)
	}
	_, ga := e.get(n, blob.GetOptions{})
	if ga.PutID != "head-put" {
		e.t.Fatalf("Get attrs PutID = %q, want head-put", ga.PutID)
	}
	a2 := e.put(n, nil, blob.PutOptions{})
	h = e.head(n)
	if h.Size != 0 || h.ETag != a2.ETag || h.PutID != "" {
		e.t.Fatalf("Head after an overwrite without PutID = %+v, want size 0, ETag %q, no PutID", h, a2.ETag)
	}
}

func testNotFound(e *env) {
	n := e.name("missing")
	e.put(e.name("missing-not"), []byte("x"), blob.PutOptions{}) // a neighbour
	e.put(e.name("missing/child"), []byte("x"), blob.PutOptions{})
	e.expectMissing(n)
	_, _, err := e.s.Get(e.ctx, n, blob.GetOptions{Offset: 0, Length: 1})
	wantErr(e.t, err, blob.ErrNotFound, "ranged Get")
	_, _, err = e.s.Get(e.ctx, n, blob.GetOptions{Offset: 5})
	wantErr(e.t, err, blob.ErrNotFound, "Get from offset 5")
}

func testUniqueETags(e *env) {
	n := e.name("etags")
	seen := map[blob.ETag]bool{}
	var last blob.ETag
	for i := range 6 {
		opts := blob.PutOptions{}
		if i%2 == 1 {
			opts.IfMatch = last
		}
		a := e.put(n, []byte("identical"), opts)
		if seen[a.ETag] {
			e.t.Fatalf("rewrite %d of identical content reused ETag %q", i, a.ETag)
		}
		seen[a.ETag] = true
		last = a.ETag
	}
	e.expect(n, []byte("identical"), last)
}

// listNames are chosen so that byte order differs from a directory walk:
// '-' (0x2d) < '.' (0x2e) < '/' (0x2f) < '0' (0x30), and 'A' < 'a' < '~' < 'é'.
var listNames = []string{
	"p/a-c", "p/a/b", "p/a.b", "p/a0", "p/a", "p/a/b/c", "p/a/b-", "p/b", "p/A", "p/a~", "p/é", "p/a/a", "p/a-",
}

func (e *env) putAll(suffixes []string) map[string]blob.Attrs {
	e.t.Helper()
	out := map[string]blob.Attrs{}
	for _, s := range suffixes {
		n := e.name(s)
		out[n] = e.put(n, []byte("data of "+s), blob.PutOptions{})
	}
	return out
}

func (e *env) wantList(prefix string, max int, want []string, attrs map[string]blob.Attrs) {
	e.t.Helper()
	got := e.list(prefix, max)
	if fmt.Sprint(names(got)) != fmt.Sprint(want) {
		e.t.Fatalf("List(%q, max %d) =\n  %q\nwant\n  %q", prefix, max, names(got), want)
	}
	for _, g := range got {
		if w, ok := attrs[g.Name]; ok && (g.ETag != w.ETag || g.Size != w.Size) {
			e.t.Fatalf("List(%q) item %+v, want ETag %q size %d", prefix, g, w.ETag, w.Size)
		}
	}
}

func (e *env) sortedNames(suffixes []string, keep func(string) bool) []string {
	var out []string
	for _, s := range suffixes {
		if n := e.name(s); keep(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func testListOrder(e *env) {
	attrs := e.putAll(listNames)
	want := e.sortedNames(listNames, func(string) bool { return true })
	// Spell out the tricky part, so that a sort bug here cannot hide one there.
	p := e.name("p/")
	must := []string{p + "A", p + "a", p + "a-", p + "a-c", p + "a.b", p + "a/a", p + "a/b", p + "a/b-", p + "a/b/c", p + "a0", p + "a~", p + "b", p + "é"}
	if fmt.Sprint(want) != fmt.Sprint(must) {
		e.t.Fatalf("suite bug: sorted names %q, want %q", want, must)
	}
	e.wantList(e.pfx, 0, want, attrs)
	e.wantList(e.pfx, 1000, want, attrs)
}

func testListPagination(e *env) {
	attrs := e.putAll(listNames)
	want := e.sortedNames(listNames, func(string) bool { return true })
	for _, max := range []int{1, 2, 3, 5, len(want) - 1, len(want), len(want) + 1} {
		e.wantList(e.pfx, max, want, attrs)
	}
	// A token from one page stays valid after a write lands behind it.
	p, err := e.s.List(e.ctx, e.pfx, "", 3)
	if err != nil || len(p.Items) == 0 || p.Next == "" {
		e.t.Fatalf("List(max 3) = %+v, %v: want a first page and a token", p, err)
	}
	e.put(e.name("p/0-before-everything"), []byte("x"), blob.PutOptions{})
	var rest []string
	for tok := p.Next; tok != ""; {
		q, err := e.s.List(e.ctx, e.pfx, tok, 3)
		if err != nil {
			e.t.Fatalf("List(token %q): %v", tok, err)
		}
		rest = append(rest, names(q.Items)...)
		tok = q.Next
	}
	got := append(names(p.Items), rest...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("paged List with a write behind the token =\n  %q\nwant\n  %q", got, want)
	}
}

func testListPrefix(e *env) {
	suffixes := append([]string{"q/a", "q/a/x", "pa", "p"}, listNames...)
	attrs := e.putAll(suffixes)
	for _, pre := range []string{"p/", "p/a", "p/a/", "p/a/b", "p/a-", "p/a.", "p/é", "q/", "p", "q/a"} {
		prefix := e.name(pre)
		want := e.sortedNames(suffixes, func(n string) bool { return strings.HasPrefix(n, prefix) })
		if len(want) == 0 {
			e.t.Fatalf("suite bug: prefix %q matches nothing", prefix)
		}
		e.wantList(prefix, 0, want, attrs)
		e.wantList(prefix, 2, want, attrs)
	}
	for _, pre := range []string{"none", "none/", "p/a/b/c/", "p/zz", "p/a/bb"} {
		e.wantList(e.name(pre), 0, nil, attrs)
	}
}

// testListAll lists the whole store. Other tests may share it, so only order
// and inclusion are checked.
func testListAll(e *env) {
	attrs := e.putAll([]string{"all/x", "all-y", "all.z"})
	got := names(e.list("", 0))
	if !sort.StringsAreSorted(got) {
		e.t.Fatalf("List(\"\") is not sorted: %q", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			e.t.Fatalf("List(\"\") returns %q twice", got[i])
		}
	}
	for n := range attrs {
		i := sort.SearchStrings(got, n)
		if i == len(got) || got[i] != n {
			e.t.Fatalf("List(\"\") lacks %q", n)
		}
	}
}

func testDelete(e *env) {
	n := e.name("del")
	a := e.put(n, []byte("x"), blob.PutOptions{})
	e.put(n+"/child", []byte("child"), blob.PutOptions{})
	e.put(n+"-sibling", []byte("sibling"), blob.PutOptions{})
	if err := e.s.Delete(e.ctx, n, blob.DeleteOptions{}); err != nil {
		e.t.Fatalf("Delete: %v", err)
	}
	e.expectMissing(n)
	if got := names(e.list(e.pfx, 0)); fmt.Sprint(got) != fmt.Sprint([]string{n + "-sibling", n + "/child"}) {
		e.t.Fatalf("List after Delete = %q", got)
	}
	b := e.put(n, []byte("x"), blob.PutOptions{IfNoneMatch: true})
	if b.ETag == a.ETag {
		e.t.Fatalf("re-created blob reuses ETag %q", a.ETag)
	}
	e.expect(n, []byte("x"), b.ETag)
	// Deleting the child leaves the parent name intact.
	if err := e.s.Delete(e.ctx, n+"/child", blob.DeleteOptions{}); err != nil {
		e.t.Fatalf("Delete child: %v", err)
	}
	e.expectMissing(n + "/child")
	e.expect(n, []byte("x"), b.ETag)
}

func testDeleteMissing(e *env) {
	n := e.name("del-missing")
	err := e.s.Delete(e.ctx, n, blob.DeleteOptions{})
	wantErr(e.t, err, blob.ErrNotFound, "Delete of a missing blob")
	e.put(n, []byte("x"), blob.PutOptions{})
	if err := e.s.Delete(e.ctx, n, blob.DeleteOptions{}); err != nil {
		e.t.Fatalf("Delete: %v", err)
	}
	err = e.s.Delete(e.ctx, n, blob.DeleteOptions{})
	wantErr(e.t, err, blob.ErrNotFound, "second Delete")
	// A conditional delete of a missing blob fails; which class is backend
	// specific (Azure answers 404 or 412).
	err = e.s.Delete(e.ctx, n, blob.DeleteOptions{IfMatch: "whatever"})
	if !errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrConditionFailed) {
		e.t.Fatalf("conditional Delete of a missing blob: %v, want ErrNotFound or ErrConditionFailed", err)
	}
}

func testDeleteConditional(e *env) {
	n := e.name("del-cond")
	a0 := e.put(n, []byte("v0"), blob.PutOptions{})
	a1 := e.put(n, []byte("v1"), blob.PutOptions{})
	err := e.s.Delete(e.ctx, n, blob.DeleteOptions{IfMatch: a0.ETag})
	wantErr(e.t, err, blob.ErrConditionFailed, "Delete with a stale ETag")
	e.expect(n, []byte("v1"), a1.ETag)
	if err := e.s.Delete(e.ctx, n, blob.DeleteOptions{IfMatch: a1.ETag}); err != nil {
		e.t.Fatalf("Delete with the current ETag: %v", err)
	}
	e.expectMissing(n)
}

func testInvalidNames(e *env) {
	bad := []string{
		"",
		"/abs",
		"/" + e.name("abs"),
		"..",
		"../x",
		e.name("a/../b"),
		e.name(".."),
		e.name("."),
		e.name("./b"),
		e.name("a/./b"),
		e.name("a//b"),
		e.name("trailing/"),
		e.name("nul\x00b"),
		e.name("back\\slash"),
		e.name("bad\xff\xfeutf8"),
		strings.Repeat("x", blob.MaxNameBytes+1),
		e.name(strings.Repeat("y", blob.MaxNameBytes+1-len(e.pfx))),
	}
	for _, n := range bad {
		_, _, err := e.s.Get(e.ctx, n, blob.GetOptions{})
		wantErr(e.t, err, blob.ErrInvalidName, "Get(%q)", n)
		_, _, err = e.s.Get(e.ctx, n, blob.GetOptions{Offset: 1, Length: 1})
		wantErr(e.t, err, blob.ErrInvalidName, "ranged Get(%q)", n)
		_, err = e.s.Head(e.ctx, n)
		wantErr(e.t, err, blob.ErrInvalidName, "Head(%q)", n)
		for _, opts := range []blob.PutOptions{{}, {IfNoneMatch: true}, {IfMatch: "x", PutID: "p"}} {
			_, err = e.s.Put(e.ctx, n, []byte("escaped"), opts)
			wantErr(e.t, err, blob.ErrInvalidName, "Put(%q, %+v)", n, opts)
		}
		err = e.s.Delete(e.ctx, n, blob.DeleteOptions{})
		wantErr(e.t, err, blob.ErrInvalidName, "Delete(%q)", n)
	}
	for _, p := range []string{"/", "/x", "..", "../", e.name("a/../"), e.name("a//"), e.name("a\x00"), e.name("./")} {
		_, err := e.s.List(e.ctx, p, "", 0)
		wantErr(e.t, err, blob.ErrInvalidName, "List(%q)", p)
	}
	// Nothing was written anywhere a normalizing backend might put it.
	e.wantList(e.pfx, 0, nil, nil)
	for _, n := range []string{"abs", "b", "a/b", "a", "x"} {
		e.expectMissing(e.name(n))
	}
}

func testValidNames(e *env) {
	long := e.name(strings.Repeat("s", blob.MaxNameBytes-len(e.pfx)))
	var deep strings.Builder
	deep.WriteString(e.pfx)
	for deep.Len() < blob.MaxNameBytes-2 {
		deep.WriteString("d/")
	}
	deep.WriteString("zz"[:blob.MaxNameBytes-deep.Len()])
	good := []string{
		long,
		deep.String(),
		e.name("case"), e.name("CASE"), e.name("Case"),
		e.name("A"), e.name("%41"), e.name("a%2Fb"), e.name("x~b"), e.name("x~d"), e.name("~"), e.name("x"),
		e.name("Mixed Case/sp ace/ünïcödé/日本語/a+b=c,d;e@f!g'h(i)j$k&l"),
		e.name("dots/..x/x../.../a.b"),
		e.name(strings.Repeat("M", 300) + "/leaf"), e.name(strings.Repeat("M", 300) + "-"),
	}
	if len(long) != blob.MaxNameBytes || deep.Len() != blob.MaxNameBytes {
		e.t.Fatalf("suite bug: long names have %d and %d bytes", len(long), deep.Len())
	}
	attrs := map[string]blob.Attrs{}
	for i, n := range good {
		attrs[n] = e.put(n, []byte(fmt.Sprintf("blob %d", i)), blob.PutOptions{IfNoneMatch: true})
	}
	for i, n := range good {
		e.expect(n, []byte(fmt.Sprintf("blob %d", i)), attrs[n].ETag)
	}
	want := append([]string{}, good...)
	sort.Strings(want)
	e.wantList(e.pfx, 0, want, attrs)
	e.wantList(e.pfx, 4, want, attrs)
	for _, n := range good {
		if err := e.s.Delete(e.ctx, n, blob.DeleteOptions{IfMatch: attrs[n].ETag}); err != nil {
			e.t.Fatalf("Delete(%q): %v", n, err)
		}
	}
	e.wantList(e.pfx, 0, nil, nil)
}

// testNameAndChildCoexist: Azure has no directories, so "x" and "x/y" are
// independent blobs. A file-system backend must not let them clash.
func testNameAndChildCoexist(e *env) {
	order := []string{"shards/x/manifest", "shards/x/manifest/y", "shards/x/manifest/y/z", "shards/x"}
	attrs := map[string]blob.Attrs{}
	for _, s := range order {
		attrs[e.name(s)] = e.put(e.name(s), []byte(s), blob.PutOptions{IfNoneMatch: true})
	}
	// And the other way round: child first, then the parent name.
	for _, s := range []string{"c/d/e", "c/d", "c"} {
		attrs[e.name(s)] = e.put(e.name(s), []byte(s), blob.PutOptions{IfNoneMatch: true})
	}
	for n, a := range attrs {
		e.expect(n, []byte(strings.TrimPrefix(n, e.pfx)), a.ETag)
	}
	// CAS on the parent leaves the children alone.
	m := e.name("shards/x/manifest")
	a := e.put(m, []byte("v2"), blob.PutOptions{IfMatch: attrs[m].ETag})
	e.expect(m, []byte("v2"), a.ETag)
	e.expect(m+"/y", []byte("shards/x/manifest/y"), attrs[m+"/y"].ETag)
	if err := e.s.Delete(e.ctx, m+"/y", blob.DeleteOptions{}); err != nil {
		e.t.Fatalf("Delete: %v", err)
	}
	e.expect(m, []byte("v2"), a.ETag)
	e.expect(m+"/y/z", []byte("shards/x/manifest/y/z"), attrs[m+"/y/z"].ETag)
	e.wantList(e.name("shards/"), 0, []string{e.name("shards/x"), m, m + "/y/z"}, nil)
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

func testCanceledContext(e *env) {
	n := e.name("canceled")
	a := e.put(n, []byte("v0"), blob.PutOptions{})
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	check := func(what string, err error) {
		e.t.Helper()
		if !errors.Is(err, context.Canceled) {
			e.t.Fatalf("%s with a canceled context: %v, want context.Canceled", what, err)
		}
	}
	_, _, err := e.s.Get(ctx, n, blob.GetOptions{})
	check("Get", err)
	_, err = e.s.Head(ctx, n)
	check("Head", err)
	_, err = e.s.List(ctx, e.pfx, "", 0)
	check("List", err)
	_, err = e.s.Put(ctx, n, []byte("v1"), blob.PutOptions{IfMatch: a.ETag})
	check("Put", err)
	_, err = e.s.Put(ctx, e.name("canceled-new"), []byte("v1"), blob.PutOptions{})
	check("Put", err)
	err = e.s.Delete(ctx, n, blob.DeleteOptions{})
	check("Delete", err)
	// None of it was applied.
	e.expect(n, []byte("v0"), a.ETag)
	e.expectMissing(e.name("canceled-new"))
}

// testNoAliasing: a store must neither keep the caller's slice nor hand out
// its own.
func testNoAliasing(e *env) {
	n := e.name("alias")
	data := []byte("original")
	a := e.put(n, data, blob.PutOptions{})
	copy(data, "CHANGED!")
	got, _ := e.get(n, blob.GetOptions{})
	copy(got, "CHANGED!")
	got2, _ := e.get(n, blob.GetOptions{Offset: 0, Length: 4})
	copy(got2, "XXXX")
	e.expect(n, []byte("original"), a.ETag)
}

// delimited follows a delimited listing to its end with pages of at most
// max entries, and returns its entries in order: item names and prefixes,
// each list's entries in byte order. A page's items and prefixes
// interleave in name order, so the whole listing is checked merged.
func (e *env) delimited(prefix, delim string, max int) []string {
	e.t.Helper()
	var all []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			e.t.Fatalf("ListDelimited(%q, %q, max %d): more than 10000 pages", prefix, delim, max)
		}
		p, err := e.s.ListDelimited(e.ctx, prefix, delim, token, max)
		if err != nil {
			e.t.Fatalf("ListDelimited(%q, %q, %q, %d): %v", prefix, delim, token, max, err)
		}
		if max > 0 && len(p.Items)+len(p.Prefixes) > max {
			e.t.Fatalf("ListDelimited(%q, %q, %q, %d) returned %d entries", prefix, delim, token, max, len(p.Items)+len(p.Prefixes))
		}
		if !sort.StringsAreSorted(p.Prefixes) || !sort.StringsAreSorted(names(p.Items)) {
			e.t.Fatalf("ListDelimited page not sorted: items %q prefixes %q", names(p.Items), p.Prefixes)
		}
		page := append(names(p.Items), p.Prefixes...)
		sort.Strings(page)
		all = append(all, page...)
		if p.Next == "" {
			return all
		}
		if p.Next == token {
			e.t.Fatalf("ListDelimited(%q): token %q did not advance", prefix, token)
		}
		token = p.Next
	}
}

// wantDelimited is the listing a model of Azure's hierarchical listing
// gives for the stored names.
func wantDelimited(stored []string, prefix, delim string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range stored {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		entry, _ := blob.RollUp(prefix, delim, n)
		if !seen[entry] {
			seen[entry] = true
			out = append(out, entry)
		}
	}
	sort.Strings(out)
	return out
}

// delimNames look like shards: a manifest and generations per shard, with
// nested shards, names that sort around "/" and an underscore inside a
// segment.
var delimNames = []string{
	"s/a/_manifest", "s/a/_g/1", "s/a/_g/2", "s/a/b/_manifest", "s/a/b/_g/1",
	"s/a-x/_manifest", "s/a.y/_g/1", "s/a0/_manifest", "s/a_b/_manifest",
	"s/b/_manifest", "s/b/c/d/_manifest", "s/b/c/d/_g/7", "s/top", "s/z/_l/1",
}

func testListDelimited(e *env) {
	e.putAll(delimNames)
	stored := e.sortedNames(delimNames, func(string) bool { return true })
	for _, c := range []struct{ prefix, delim string }{
		{"s/", "/_"}, {"s/a", "/_"}, {"s/a/", "/_"}, {"s/b", "/_"}, {"s/", "/"}, {"s/a/", "/"}, {"", "/"}, {"s/", "_"}, {"s/nothing", "/_"},
	} {
		prefix := e.name(c.prefix)
		if c.prefix == "" {
			prefix = e.pfx
		}
		want := wantDelimited(stored, prefix, c.delim)
		for _, max := range []int{0, 1, 2, 3, 1000} {
			if got := e.delimited(prefix, c.delim, max); fmt.Sprint(got) != fmt.Sprint(want) {
				e.t.Fatalf("ListDelimited(%q, %q, max %d) =\n  %q\nwant\n  %q", prefix, c.delim, max, got, want)
			}
		}
	}
	p, err := e.s.ListDelimited(e.ctx, e.pfx, "/", "", 0)
	if err != nil || len(p.Prefixes) != 1 || len(p.Items) != 0 {
		e.t.Fatalf("ListDelimited(%q, \"/\") = %+v, %v: want the one prefix %q", e.pfx, p, err, e.name("s/"))
	}
	p, err = e.s.ListDelimited(e.ctx, e.name("s/"), "/_", "", 0)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, it := range p.Items {
		if it.Name == e.name("s/top") && it.Size != int64(len("data of s/top")) {
			e.t.Fatalf("ListDelimited item %+v: wrong size", it)
		}
	}
	_, err = e.s.ListDelimited(e.ctx, e.pfx, "", "", 0)
	wantErr(e.t, err, blob.ErrInvalidName, "ListDelimited with an empty delimiter")
}

func testListDelimitedPagination(e *env) {
	e.putAll(delimNames)
	prefix := e.name("s/")
	want := wantDelimited(e.sortedNames(delimNames, func(string) bool { return true }), prefix, "/_")
	// A token stays valid after blobs land under the prefix it rolled up
	// and behind it: nothing listed twice, nothing after it missed.
	p, err := e.s.ListDelimited(e.ctx, prefix, "/_", "", 2)
	if err != nil || p.Next == "" {
		e.t.Fatalf("ListDelimited(max 2) = %+v, %v: want a token", p, err)
	}
	e.put(e.name("s/a/_g/9"), []byte("x"), blob.PutOptions{})
	e.put(e.name("s/0/_manifest"), []byte("x"), blob.PutOptions{})
	got := append(names(p.Items), p.Prefixes...)
	sort.Strings(got)
	for tok := p.Next; tok != ""; {
		q, err := e.s.ListDelimited(e.ctx, prefix, "/_", tok, 2)
		if err != nil {
			e.t.Fatalf("ListDelimited(token %q): %v", tok, err)
		}
		page := append(names(q.Items), q.Prefixes...)
		sort.Strings(page)
		got = append(got, page...)
		tok = q.Next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("paged ListDelimited with writes behind the token =\n  %q\nwant\n  %q", got, want)
	}
}

// testListDelimitedStartAfter starts listings at names with tokens the
// caller built: each lists exactly what comes after, however the backend
// does it (Azurite ignores startFrom).
func testListDelimitedStartAfter(e *env) {
	e.putAll(delimNames)
	prefix := e.name("s/")
	want := wantDelimited(e.sortedNames(delimNames, func(string) bool { return true }), prefix, "/_")
	for _, from := range []blob.DelimitedToken{
		{Last: e.name("s/a/_"), IsPrefix: true}, {Last: e.name("s/a/"), IsPrefix: true}, {Last: e.name("s/a0/_manifest")},
		{Last: e.name("s/b/c/d/_"), IsPrefix: true}, {Last: e.name("s/top")}, {Last: e.name("s/zz")},
	} {
		var rest []string
		for _, w := range want {
			if from.After(w) {
				rest = append(rest, w)
			}
		}
		for _, max := range []int{1, 3, 1000} {
			var got []string
			for tok, pages := from.Encode(), 0; tok != ""; pages++ {
				q, err := e.s.ListDelimited(e.ctx, prefix, "/_", tok, max)
				if err != nil || pages > 100 || len(q.Items)+len(q.Prefixes) > max {
					e.t.Fatalf("ListDelimited(after %+v, max %d) page %d = %+v, %v", from, max, pages, q, err)
				}
				page := append(names(q.Items), q.Prefixes...)
				sort.Strings(page)
				got = append(got, page...)
				tok = q.Next
			}
			if fmt.Sprint(got) != fmt.Sprint(rest) {
				e.t.Fatalf("ListDelimited after %+v, max %d =\n  %q\nwant\n  %q", from, max, got, rest)
			}
		}
	}
}

// ManyPrefixes is how many rolled-up prefixes ListDelimitedManyPrefixes
// pages through: as many shards as the lifecycle issue's pagination test.
const ManyPrefixes = 2500

// testListDelimitedManyPrefixes pages 100 at a time through 2,500 shard-like
// directories, a few with generations, under a prefix that has neighbours
// outside it: nothing missing, nothing repeated.
func testListDelimitedManyPrefixes(e *env) {
	var stored []string
	for i := range ManyPrefixes {
		stored = append(stored, e.name(fmt.Sprintf("in/s%04d/_manifest", i)))
		if i%100 == 0 {
			stored = append(stored, e.name(fmt.Sprintf("in/s%04d/_g/1", i)), e.name(fmt.Sprintf("in/s%04d/_g/2", i)))
		}
	}
	stored = append(stored, e.name("in-x/_manifest"), e.name("inn/_manifest"))
	var (
		g    sync.WaitGroup
		sem  = make(chan struct{}, 16)
		errs = make(chan error, len(stored))
	)
	for _, n := range stored {
		g.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; g.Done() }()
			if _, err := e.s.Put(e.ctx, n, []byte("m"), blob.PutOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	g.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("Put: %v", err)
	}
	sort.Strings(stored)
	prefix := e.name("in/")
	want := wantDelimited(stored, prefix, "/_")
	if len(want) != ManyPrefixes {
		e.t.Fatalf("suite bug: %d prefixes", len(want))
	}
	got := e.delimited(prefix, "/_", 100)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("ListDelimited of %d prefixes, 100 a page: got %d entries, want %d (first difference at %d)", ManyPrefixes, len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testListDelimitedDeleted checks that a prefix stands for a stored blob:
// once the last blob under it is deleted, it is no longer listed.
func testListDelimitedDeleted(e *env) {
	e.putAll([]string{"d/a/_g/1", "d/a/_g/2", "d/b/_manifest"})
	for _, n := range []string{"d/a/_g/1", "d/a/_g/2"} {
		if err := e.s.Delete(e.ctx, e.name(n), blob.DeleteOptions{}); err != nil {
			e.t.Fatalf("Delete(%q): %v", n, err)
		}
	}
	got := e.delimited(e.name("d/"), "/_", 0)
	if want := []string{e.name("d/b/_")}; fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("ListDelimited after deleting d/a's blobs = %q, want %q", got, want)
	}
}
