package blobtest

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
)

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
			e.t.Fatalf("List(%q, %q, max %d): more than 10000 pages", prefix, delim, max)
		}
		p, err := e.s.List(e.ctx, blob.ListOptions{Prefix: prefix, Delimiter: delim, Token: token, Max: max})
		if err != nil {
			e.t.Fatalf("List(%q, %q, %q, %d): %v", prefix, delim, token, max, err)
		}
		if max > 0 && len(p.Items)+len(p.Prefixes) > max {
			e.t.Fatalf("List(%q, %q, %q, %d) returned %d entries", prefix, delim, token, max, len(p.Items)+len(p.Prefixes))
		}
		if !sort.StringsAreSorted(p.Prefixes) || !sort.StringsAreSorted(names(p.Items)) {
			e.t.Fatalf("List, delimited, page not sorted: items %q prefixes %q", names(p.Items), p.Prefixes)
		}
		page := append(names(p.Items), p.Prefixes...)
		sort.Strings(page)
		all = append(all, page...)
		if p.Next == "" {
			return all
		}
		if p.Next == token {
			e.t.Fatalf("List(%q): token %q did not advance", prefix, token)
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
				e.t.Fatalf("List(%q, %q, max %d) =\n  %q\nwant\n  %q", prefix, c.delim, max, got, want)
			}
		}
	}
	p, err := e.s.List(e.ctx, blob.ListOptions{Prefix: e.pfx, Delimiter: "/"})
	if err != nil || len(p.Prefixes) != 1 || len(p.Items) != 0 {
		e.t.Fatalf("List(%q, \"/\") = %+v, %v: want the one prefix %q", e.pfx, p, err, e.name("s/"))
	}
	p, err = e.s.List(e.ctx, blob.ListOptions{Prefix: e.name("s/"), Delimiter: "/_"})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, it := range p.Items {
		if it.Name == e.name("s/top") && it.Size != int64(len("data of s/top")) {
			e.t.Fatalf("List, delimited, item %+v: wrong size", it)
		}
	}
	// No delimiter is one listing on every backend: every name, as items.
	p, err = e.s.List(e.ctx, blob.ListOptions{Prefix: e.pfx})
	if got := names(p.Items); err != nil || len(p.Prefixes) != 0 || fmt.Sprint(got) != fmt.Sprint(stored) {
		e.t.Fatalf("List(%q) without a delimiter = items %q, prefixes %q, %v; want every name as an item", e.pfx, got, p.Prefixes, err)
	}
	_, err = e.s.List(e.ctx, blob.ListOptions{Prefix: e.pfx, Delimiter: "/", Token: "x: not a token"})
	wantErr(e.t, err, blob.ErrInvalidName, "List with a delimiter and a token that is not one")
}

func testListDelimitedPagination(e *env) {
	e.putAll(delimNames)
	prefix := e.name("s/")
	want := wantDelimited(e.sortedNames(delimNames, func(string) bool { return true }), prefix, "/_")
	// A token stays valid after blobs land under the prefix it rolled up
	// and behind it: nothing listed twice, nothing after it missed.
	p, err := e.s.List(e.ctx, blob.ListOptions{Prefix: prefix, Delimiter: "/_", Max: 2})
	if err != nil || p.Next == "" {
		e.t.Fatalf("List(max 2) = %+v, %v: want a token", p, err)
	}
	e.put(e.name("s/a/_g/9"), []byte("x"), blob.PutOptions{})
	e.put(e.name("s/0/_manifest"), []byte("x"), blob.PutOptions{})
	got := append(names(p.Items), p.Prefixes...)
	sort.Strings(got)
	for tok := p.Next; tok != ""; {
		q, err := e.s.List(e.ctx, blob.ListOptions{Prefix: prefix, Delimiter: "/_", Token: tok, Max: 2})
		if err != nil {
			e.t.Fatalf("List(token %q): %v", tok, err)
		}
		page := append(names(q.Items), q.Prefixes...)
		sort.Strings(page)
		got = append(got, page...)
		tok = q.Next
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("paged delimited List with writes behind the token =\n  %q\nwant\n  %q", got, want)
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
				q, err := e.s.List(e.ctx, blob.ListOptions{Prefix: prefix, Delimiter: "/_", Token: tok, Max: max})
				if err != nil || pages > 100 || len(q.Items)+len(q.Prefixes) > max {
					e.t.Fatalf("List(after %+v, max %d) page %d = %+v, %v", from, max, pages, q, err)
				}
				page := append(names(q.Items), q.Prefixes...)
				sort.Strings(page)
				got = append(got, page...)
				tok = q.Next
			}
			if fmt.Sprint(got) != fmt.Sprint(rest) {
				e.t.Fatalf("List, delimited, after %+v, max %d =\n  %q\nwant\n  %q", from, max, got, rest)
			}
		}
	}
}

// ManyPrefixes is how many rolled-up prefixes ListDelimitedManyPrefixes
// pages through: as many shards as the lifecycle issue's pagination test.
const ManyPrefixes = 2500

// testListDelimitedManyPrefixes pages 100 at a time through 2,500 shard-like
// directories, a few with generations, under a prefix that has neighbours
// outside it: nothing missing, nothing repeated. Then, with a shard's own
// blobs at the prefix itself, a nested shard and more neighbours, it pages
// as ListShards does (internal/shard/list.go), each page a new listing from
// a token built after the last entry shown, and lists the root: the store
// half of ListShards' pagination, on every backend.
func testListDelimitedManyPrefixes(e *env) {
	var stored []string
	for i := range ManyPrefixes {
		stored = append(stored, e.name(fmt.Sprintf("in/s%04d/_manifest", i)))
		if i%100 == 0 {
			stored = append(stored, e.name(fmt.Sprintf("in/s%04d/_g/1", i)), e.name(fmt.Sprintf("in/s%04d/_g/2", i)))
		}
	}
	stored = append(stored, e.name("in-x/_manifest"), e.name("inn/_manifest"))
	e.putMany(stored)
	sort.Strings(stored)
	prefix := e.name("in/")
	want := wantDelimited(stored, prefix, "/_")
	if len(want) != ManyPrefixes {
		e.t.Fatalf("suite bug: %d prefixes", len(want))
	}
	got := e.delimited(prefix, "/_", 100)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("List of %d prefixes, delimited, 100 a page: got %d entries, want %d (first difference at %d)", ManyPrefixes, len(got), len(want), firstDiff(got, want))
	}

	more := []string{e.name("in/_manifest"), e.name("in/_g/1"), e.name("in/s0007/nested/_manifest"),
		e.name("in0/_manifest"), e.name("ino/a/_manifest"), e.name("other/_manifest")}
	for i := 90; i < 110; i++ {
		// Generations about the first page's end: a token there rolls up
		// a directory that a walk must not enter again.
		more = append(more, e.name(fmt.Sprintf("in/s%04d/_g/3", i)))
	}
	e.putMany(more)
	stored = append(stored, more...)
	sort.Strings(stored)
	want = wantDelimited(stored, prefix, "/_")
	if len(want) != ManyPrefixes+3 {
		e.t.Fatalf("suite bug: %d entries", len(want))
	}
	if got := e.delimited(prefix, "/_", 100); fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("List of %d entries, delimited, 100 a page: got %d, want %d (first difference at %d)", len(want), len(got), len(want), firstDiff(got, want))
	}
	if got := e.resumed(prefix, "/_", 100); fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Fatalf("List of %d entries, delimited, each page of 100 after a built token: got %d, want %d (first difference at %d)", len(want), len(got), len(want), firstDiff(got, want))
	}
	root := e.delimited(e.pfx, "/_", 1000)
	if fmt.Sprint(root) != fmt.Sprint(wantDelimited(stored, e.pfx, "/_")) || root[0] != e.name("in-x/_") {
		e.t.Fatalf("List(%q), delimited = %q: want %q first (\"a-x/_\" lists before \"a/_\")", e.pfx, root, e.name("in-x/_"))
	}
}

// putMany puts every name, 16 at a time.
func (e *env) putMany(names []string) {
	e.t.Helper()
	var (
		g    sync.WaitGroup
		sem  = make(chan struct{}, 16)
		errs = make(chan error, len(names))
	)
	for _, n := range names {
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
}

// resumed lists as ListShards does: every page is a new listing that
// starts after the last entry of the page before, from a token the caller
// built, never the backend's Next. A backend that restarted such a listing
// (Azurite ignores startFrom) would list the first page again.
func (e *env) resumed(prefix, delim string, max int) []string {
	e.t.Helper()
	var all []string
	tok := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			e.t.Fatalf("List(%q, delimiter %q, max %d) after built tokens: more than 10000 pages", prefix, delim, max)
		}
		p, err := e.s.List(e.ctx, blob.ListOptions{Prefix: prefix, Delimiter: delim, Token: tok, Max: max})
		if err != nil {
			e.t.Fatalf("List(%q, delimiter %q, token %q, max %d): %v", prefix, delim, tok, max, err)
		}
		if len(p.Items)+len(p.Prefixes) > max {
			e.t.Fatalf("List(%q, delimiter %q, token %q, max %d) returned %d entries", prefix, delim, tok, max, len(p.Items)+len(p.Prefixes))
		}
		from, _ := blob.ParseDelimitedToken(tok)
		var last blob.DelimitedToken
		for _, it := range p.Items {
			last = max2(last, blob.DelimitedToken{Last: it.Name})
		}
		for _, pf := range p.Prefixes {
			last = max2(last, blob.DelimitedToken{Last: pf, IsPrefix: true})
		}
		page := append(names(p.Items), p.Prefixes...)
		sort.Strings(page)
		if len(page) > 0 && !from.After(page[0]) {
			e.t.Fatalf("List(%q, delimiter %q, token %q) lists %q again: the listing restarted", prefix, delim, tok, page[0])
		}
		all = append(all, page...)
		if p.Next == "" {
			return all
		}
		tok = last.Encode()
		if last.Last == "" {
			tok = p.Next // an empty page (Azure may send one): go on as ListShards does
		}
	}
}

// max2 is the later of two entries in name order.
func max2(a, b blob.DelimitedToken) blob.DelimitedToken {
	if b.Last > a.Last {
		return b
	}
	return a
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
		e.t.Fatalf("List, delimited, after deleting d/a's blobs = %q, want %q", got, want)
	}
}
