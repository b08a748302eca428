package azure

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// triesByStatus reads every status of m.
func triesByStatus(m *TryMetrics) map[string]float64 {
	out := map[string]float64{}
	for _, s := range TryStatuses {
		out[s] = testutil.ToFloat64(m.tries.WithLabelValues(s))
	}
	return out
}

// TestThrottledTriesAreCounted answers a Put's first two tries with 503 and
// 429 before Azurite sees them; the SDK retries both and the third try
// lands. The operation succeeds, so only a count per try shows that Azure
// throttled it twice.
func TestThrottledTriesAreCounted(t *testing.T) {
	var throttle atomic.Int32
	log := &wireLog{}
	m := NewTryMetrics(nil)
	cfg := testConfig(uniqueContainer("throttled"))
	cfg.Tries = m
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		var resp *http.Response
		var err error
		switch n := throttle.Load(); {
		case isBlobPut(req) && n > 0 && throttle.CompareAndSwap(n, n-1):
			status, code := http.StatusServiceUnavailable, "ServerBusy"
			if n == 1 {
				status, code = http.StatusTooManyRequests, "TooManyRequests"
			}
			resp = fakeResponse(req, status, code)
		default:
			resp, err = next.RoundTrip(req)
		}
		log.add(req, resp, err)
		return resp, err
	})
	s := newTestStore(t, cfg)
	before := triesByStatus(m)
	log.reset()
	throttle.Store(2)
	if _, err := s.Put(t.Context(), "throttled/gen-1", []byte("payload"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("Put after two throttled tries: %v (wire: %s)", err, log)
	}
	if got, want := log.String(), "PUT 503, PUT 429, PUT 201"; got != want {
		t.Fatalf("wire = %q, want %q", got, want)
	}
	after := triesByStatus(m)
	for _, s := range TryStatuses {
		want := map[string]float64{"503": 1, "429": 1, "2xx": 1}[s]
		if got := after[s] - before[s]; got != want {
			t.Errorf("rolloutd_blob_tries_total{status=%q} rose by %v, want %v (before %v, after %v)", s, got, want, before, after)
		}
	}
}

// Every try lands in one of the fixed statuses.
func TestTryStatus(t *testing.T) {
	for _, tc := range []struct {
		code int
		err  error
		want string
	}{
		{201, nil, "2xx"}, {206, nil, "2xx"}, {304, nil, "3xx"}, {404, nil, "4xx"}, {409, nil, "4xx"}, {412, nil, "4xx"},
		{429, nil, "429"}, {500, nil, "5xx"}, {502, nil, "5xx"}, {503, nil, "503"}, {0, resetErr(), "error"}, {999, nil, "error"},
	} {
		var resp *http.Response
		if tc.err == nil {
			resp = &http.Response{StatusCode: tc.code}
		}
		if got := tryStatus(resp, tc.err); got != tc.want {
			t.Errorf("tryStatus(%d, %v) = %q, want %q", tc.code, tc.err, got, tc.want)
		}
	}
}
