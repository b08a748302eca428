package azure

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// wantClass fails unless err matches want and no other blob class.
func wantClass(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
	for _, c := range []error{blob.ErrNotFound, blob.ErrConditionFailed, blob.ErrNotModified,
		blob.ErrUnavailable, blob.ErrOutcomeUnknown, blob.ErrInvalidName, blob.ErrClosed} {
		if c != want && errors.Is(err, c) {
			t.Fatalf("%s: error %v matches %v as well as %v", what, err, c, want)
		}
	}
}

// lostResponseStore returns a Store whose transport, once armed, forwards
// the next blob PUT to Azurite, lets it land, and then reports a connection
// reset instead of the response. Every request is logged.
func lostResponseStore(t *testing.T, container string) (s *Store, arm func(), log *wireLog) {
	var armed atomic.Bool
	log = &wireLog{}
	cfg := testConfig(container)
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		log.add(req, resp, err)
		if err == nil && isBlobPut(req) && armed.CompareAndSwap(true, false) {
			drain(resp) // it landed; the client never hears
			return nil, resetErr()
		}
		return resp, err
	})
	s = newTestStore(t, cfg)
	return s, func() { log.reset(); armed.Store(true) }, log
}

// TestLostResponse is the SlateDB bug (slatedb#766): the first try of a
// conditional put lands but its response is lost; the SDK retries, the
// retry loses the condition to the first try. The put must report success
// with the first try's ETag, the content must be written once, and nothing
// may look like a lost race.
func TestLostResponse(t *testing.T) {
	ctx := t.Context()
	s, arm, log := lostResponseStore(t, "lost-response")
	for _, putID := range []string{"caller-id-1", ""} {
		t.Run("CreateOnly/PutID="+putID, func(t *testing.T) {
			n := uniqueContainer("create") + "/gen-1"
			data := []byte("generation payload")
			arm()
			a, err := s.Put(ctx, n, data, blob.PutOptions{IfNoneMatch: true, PutID: putID})
			if err != nil {
				t.Fatalf("Put after a lost response: %v (wire: %s)", err, log)
			}
			if got, want := log.String(), "PUT 201, PUT 409, HEAD 200"; got != want {
				t.Fatalf("wire = %q, want %q: one write (its 201 lost), one rejected retry, one check", got, want)
			}
			checkBlob(t, s, n, data, a, putID)
		})
		t.Run("CompareAndSwap/PutID="+putID, func(t *testing.T) {
			n := uniqueContainer("cas") + "/manifest"
			a0, err := s.Put(ctx, n, []byte("epoch 1"), blob.PutOptions{IfNoneMatch: true, PutID: "claim"})
			if err != nil {
				t.Fatal(err)
			}
			data := []byte("epoch 1, generation 1")
			arm()
			a1, err := s.Put(ctx, n, data, blob.PutOptions{IfMatch: a0.ETag, PutID: putID})
			if err != nil {
				t.Fatalf("CAS after a lost response: %v (wire: %s)", err, log)
			}
			if got, want := log.String(), "PUT 201, PUT 412, HEAD 200"; got != want {
				t.Fatalf("wire = %q, want %q", got, want)
			}
			if a1.ETag == a0.ETag {
				t.Fatalf("CAS returned the old ETag")
			}
			checkBlob(t, s, n, data, a1, putID)
			// The old ETag is really gone: a stale CAS loses.
			_, err = s.Put(ctx, n, []byte("stale"), blob.PutOptions{IfMatch: a0.ETag, PutID: "stale"})
			wantClass(t, err, blob.ErrConditionFailed, "stale CAS")
		})
	}
}

func checkBlob(t *testing.T, s *Store, name string, data []byte, a blob.Attrs, putID string) {
	t.Helper()
	got, ga, err := s.Get(t.Context(), name, blob.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || ga.ETag != a.ETag || a.Size != int64(len(data)) || a.PutID != putID {
		t.Fatalf("stored %q %+v; Put returned %+v; want %q, the same ETag, PutID %q", got, ga, a, data, putID)
	}
	h, err := s.Head(t.Context(), name)
	if err != nil || h.PutID != putID || h.ETag != a.ETag {
		t.Fatalf("Head = %+v, %v; want ETag %s PutID %q", h, err, a.ETag, putID)
	}
}

// TestLostResponseThenCompetingWrite: the first try lands, another writer
// overwrites it, the retry loses its condition. The put may have been
// applied (it was, and then replaced), so reporting ErrConditionFailed
// would be a false fence: the outcome is unknown.
func TestLostResponseThenCompetingWrite(t *testing.T) {
	ctx := t.Context()
	other := newTestStore(t, testConfig("competing"))
	name := uniqueContainer("m") + "/manifest"
	var armed atomic.Bool
	var competitorErr error
	cfg := testConfig("competing")
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && isBlobPut(req) && armed.CompareAndSwap(true, false) {
			drain(resp)
			_, competitorErr = other.Put(req.Context(), name, []byte("competitor"), blob.PutOptions{PutID: "competitor"})
			return nil, resetErr()
		}
		return resp, err
	})
	s := newTestStore(t, cfg)
	a0, err := s.Put(ctx, name, []byte("v0"), blob.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	_, err = s.Put(ctx, name, []byte("v1"), blob.PutOptions{IfMatch: a0.ETag, PutID: "mine"})
	if competitorErr != nil {
		t.Fatal(competitorErr)
	}
	wantClass(t, err, blob.ErrOutcomeUnknown, "CAS whose landed try was overwritten")
}

// TestLostResponseHeadFails: when the HEAD that would resolve a lost
// condition fails, the outcome is unknown, never "condition failed".
func TestLostResponseHeadFails(t *testing.T) {
	ctx := t.Context()
	var armed, failHeads atomic.Bool
	cfg := testConfig("head-fails")
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodHead && failHeads.Load() {
			closeBody(req)
			return nil, dialErr()
		}
		resp, err := next.RoundTrip(req)
		if err == nil && isBlobPut(req) && armed.CompareAndSwap(true, false) {
			drain(resp)
			return nil, resetErr()
		}
		return resp, err
	})
	s := newTestStore(t, cfg)
	name := uniqueContainer("g") + "/1"
	armed.Store(true)
	failHeads.Store(true)
	_, err := s.Put(ctx, name, []byte("x"), blob.PutOptions{IfNoneMatch: true, PutID: "p"})
	wantClass(t, err, blob.ErrOutcomeUnknown, "create-only put whose check failed")
	failHeads.Store(false)
	if h, err := s.Head(ctx, name); err != nil || h.PutID != "p" {
		t.Fatalf("Head = %+v, %v: the first try should have landed", h, err)
	}
}

// TestEveryResponseLost: every try of a conditional put lands or is
// rejected, and every response is lost. The final error is a reset, but the
// blob carries this put's key: success.
func TestEveryResponseLost(t *testing.T) {
	ctx := t.Context()
	var on atomic.Bool
	log := &wireLog{}
	cfg := testConfig("every-response-lost")
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		log.add(req, resp, err)
		if err == nil && isBlobPut(req) && on.Load() {
			drain(resp)
			return nil, resetErr()
		}
		return resp, err
	})
	s := newTestStore(t, cfg)
	name := uniqueContainer("all-lost")
	on.Store(true)
	a, err := s.Put(ctx, name, []byte("data"), blob.PutOptions{IfNoneMatch: true, PutID: "k"})
	if err != nil {
		t.Fatalf("Put: %v (wire: %s)", err, log)
	}
	if got, want := log.String(), "PUT 201, PUT 409, PUT 409, PUT 409, HEAD 200"; got != want {
		t.Fatalf("wire = %q, want %q", got, want)
	}
	checkBlob(t, s, name, []byte("data"), a, "k")

	// Without a key, an unconditional put whose responses are all lost
	// cannot be resolved.
	_, err = s.Put(ctx, name+"-unconditional", []byte("data"), blob.PutOptions{})
	wantClass(t, err, blob.ErrOutcomeUnknown, "unconditional put, every response lost")
}

// TestHungTryIsAbandoned: a try that hangs after the request was sent is
// cut off by TryTimeout and retried, and the retry resolves it, so one hung
// connection cannot stall an append for the whole RPC deadline.
func TestHungTryIsAbandoned(t *testing.T) {
	ctx := t.Context()
	var armed atomic.Bool
	cfg := testConfig("hung-try")
	cfg.TryTimeout = 300 * time.Millisecond
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && isBlobPut(req) && armed.CompareAndSwap(true, false) {
			drain(resp)
			<-req.Context().Done() // the response never comes
			return nil, req.Context().Err()
		}
		return resp, err
	})
	s := newTestStore(t, cfg)
	name := uniqueContainer("hung")
	armed.Store(true)
	start := time.Now()
	a, err := s.Put(ctx, name, []byte("payload"), blob.PutOptions{IfNoneMatch: true, PutID: "h"})
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Put took %v with a 300ms try timeout", d)
	}
	checkBlob(t, s, name, []byte("payload"), a, "h")
}

// TestDeleteLostResponse: a delete that landed but whose response was lost
// is retried and finds nothing; the blob is gone either way.
func TestDeleteLostResponse(t *testing.T) {
	ctx := t.Context()
	var armed atomic.Bool
	cfg := testConfig("delete-lost")
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && req.Method == http.MethodDelete && armed.CompareAndSwap(true, false) {
			drain(resp)
			return nil, resetErr()
		}
		return resp, err
	})
	s := newTestStore(t, cfg)
	if _, err := s.Put(ctx, "d", []byte("x"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	err := s.Delete(ctx, "d", blob.DeleteOptions{})
	wantClass(t, err, blob.ErrNotFound, "delete whose response was lost")
	if _, err := s.Head(ctx, "d"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Head after delete: %v", err)
	}
}

// TestFaultClasses checks the classification of service and network
// failures that persist through every retry.
func TestFaultClasses(t *testing.T) {
	ctx := t.Context()
	var mode atomic.Value // func(*http.Request) (*http.Response, error), or nil to pass through
	cfg := testConfig("fault-classes")
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		if f, _ := mode.Load().(func(*http.Request) (*http.Response, error)); f != nil && !isContainerReq(req) {
			return f(req)
		}
		return next.RoundTrip(req)
	})
	s := newTestStore(t, cfg)
	seed, err := s.Put(ctx, "present", []byte("x"), blob.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := func(code int, errCode string) func(*http.Request) (*http.Response, error) {
		return func(r *http.Request) (*http.Response, error) { return fakeResponse(r, code, errCode), nil }
	}
	refused := func(r *http.Request) (*http.Response, error) { closeBody(r); return nil, dialErr() }
	reset := func(r *http.Request) (*http.Response, error) { closeBody(r); return nil, resetErr() }

	for _, c := range []struct {
		name         string
		fault        func(*http.Request) (*http.Response, error)
		read, write  error // Get/Head/List and Put/Delete
		conditionalW error // a conditional Put
	}{
		{"503 ServerBusy", status(503, "ServerBusy"), blob.ErrUnavailable, blob.ErrUnavailable, blob.ErrUnavailable},
		{"429", status(429, "TooManyRequests"), blob.ErrUnavailable, blob.ErrUnavailable, blob.ErrUnavailable},
		// A 500 may have been applied (Azure: "may or may not have succeeded").
		{"500 OperationTimedOut", status(500, "OperationTimedOut"), blob.ErrUnavailable, blob.ErrOutcomeUnknown, blob.ErrOutcomeUnknown},
		{"connection refused", refused, blob.ErrUnavailable, blob.ErrUnavailable, blob.ErrUnavailable},
		// A reset after sending: reads retry, writes cannot tell.
		{"reset", reset, blob.ErrUnavailable, blob.ErrOutcomeUnknown, blob.ErrOutcomeUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			mode.Store(c.fault)
			defer mode.Store((func(*http.Request) (*http.Response, error))(nil))
			_, _, err := s.Get(ctx, "present", blob.GetOptions{})
			wantClass(t, err, c.read, "Get")
			_, err = s.Head(ctx, "present")
			wantClass(t, err, c.read, "Head")
			_, err = s.List(ctx, blob.ListOptions{})
			wantClass(t, err, c.read, "List")
			_, err = s.Put(ctx, "new", []byte("x"), blob.PutOptions{})
			wantClass(t, err, c.write, "Put")
			err = s.Delete(ctx, "present", blob.DeleteOptions{})
			wantClass(t, err, c.write, "Delete")
			_, err = s.Put(ctx, "present", []byte("y"), blob.PutOptions{IfMatch: seed.ETag, PutID: "cond"})
			wantClass(t, err, c.conditionalW, "conditional Put")
			_, err = s.Put(ctx, "present", []byte("y"), blob.PutOptions{IfNoneMatch: true})
			wantClass(t, err, c.conditionalW, "create-only Put")
		})
	}
	// Nothing above reached Azurite.
	got, a, err := s.Get(ctx, "present", blob.GetOptions{})
	if err != nil || string(got) != "x" || a.ETag != seed.ETag {
		t.Fatalf("after the faults: %q %+v %v", got, a, err)
	}
	if _, err := s.Head(ctx, "new"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Head(new) = %v", err)
	}
}

// TestTryClassification pins which single-try outcomes may have been applied.
func TestTryClassification(t *testing.T) {
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	for _, c := range []struct {
		name  string
		resp  *http.Response
		err   error
		maybe bool
	}{
		{"201", resp(201), nil, false},
		{"409", resp(409), nil, false},
		{"412", resp(412), nil, false},
		{"429", resp(429), nil, false},
		{"503", resp(503), nil, false},
		{"500", resp(500), nil, true},
		{"502", resp(502), nil, true},
		{"504", resp(504), nil, true},
		{"dial refused", nil, dialErr(), false},
		{"reset", nil, resetErr(), true},
		{"try timeout", nil, context.DeadlineExceeded, true},
		{"unknown", nil, errors.New("something"), true},
	} {
		if got := tryMaybeApplied(c.resp, c.err); got != c.maybe {
			t.Errorf("%s: maybe applied = %v, want %v", c.name, got, c.maybe)
		}
	}
}
