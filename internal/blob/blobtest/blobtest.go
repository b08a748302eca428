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
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Racers is the number of goroutines that race one conditional write.
const Racers = 8

// opTimeout bounds every subtest, so that a hanging backend fails instead
// of stalling the whole test binary.
const opTimeout = 60 * time.Second

// slowCases have a larger budget than opTimeout: ListDelimitedManyPrefixes
// puts 2,700 blobs and pages through them three times, on Azurite (which
// ignores startFrom) with one request a page that reads every name.
var slowCases = map[string]time.Duration{"ListDelimitedManyPrefixes": 5 * time.Minute}

// Run runs the conformance suite. newStore is called once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			timeout := opTimeout
			if d, ok := slowCases[c.name]; ok {
				timeout = d
			}
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
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
