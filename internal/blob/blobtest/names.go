package blobtest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rolloutd/rolloutd/internal/blob"
)

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
		_, err := e.s.List(e.ctx, blob.ListOptions{Prefix: p})
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
	_, err = e.s.List(ctx, blob.ListOptions{Prefix: e.pfx})
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
