package blobtest

import (
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/blob"
)

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
