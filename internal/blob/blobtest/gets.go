package blobtest

import (
	"bytes"
	"fmt"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

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
