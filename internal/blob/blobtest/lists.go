package blobtest

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// list follows a prefix listing to its end with pages of at most max items.
func (e *env) list(prefix string, max int) []blob.Attrs {
	e.t.Helper()
	var all []blob.Attrs
	token := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			e.t.Fatalf("List(%q, max %d): more than 10000 pages; the token does not advance", prefix, max)
		}
		p, err := e.s.List(e.ctx, blob.ListOptions{Prefix: prefix, Token: token, Max: max})
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
	p, err := e.s.List(e.ctx, blob.ListOptions{Prefix: e.pfx, Max: 3})
	if err != nil || len(p.Items) == 0 || p.Next == "" {
		e.t.Fatalf("List(max 3) = %+v, %v: want a first page and a token", p, err)
	}
	e.put(e.name("p/0-before-everything"), []byte("x"), blob.PutOptions{})
	var rest []string
	for tok := p.Next; tok != ""; {
		q, err := e.s.List(e.ctx, blob.ListOptions{Prefix: e.pfx, Token: tok, Max: 3})
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
