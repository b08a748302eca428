package main

import (
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// failingStore is a store that can fail for good, like the local store.
type failingStore struct {
	blob.Store
	err error
}

func (s *failingStore) Failed() error { return s.err }

func TestStoreFailedGauge(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store blob.Store
		want  float64
	}{
		{"a store that cannot fail for good", memstore.New(), 0},
		{"healthy", &failingStore{Store: memstore.New()}, 0},
		{"failed", &failingStore{Store: memstore.New(), err: errors.New("fsync failed")}, 1},
	} {
		if got := testutil.ToFloat64(storeFailedGauge(tc.store)); got != tc.want {
			t.Errorf("%s: rolloutd_store_failed = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// metricsText is the text of a process's /metrics.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return string(b)
}
