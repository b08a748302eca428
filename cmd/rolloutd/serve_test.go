package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

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

// failingStoreC also signals its failure, as the local store does.
type failingStoreC struct {
	failingStore
	c chan struct{}
}

func (s *failingStoreC) FailedC() <-chan struct{} { return s.c }

// A store that fails for good stops the process (through errc, as a failed
// listener does); a store that cannot fail so is not watched, and stopping
// the watch leaves nothing running.
func TestWatchStoreStopsTheProcessWhenTheStoreFails(t *testing.T) {
	errc := make(chan error, 1)
	watchStore(memstore.New(), errc)()

	s := &failingStoreC{failingStore: failingStore{Store: memstore.New()}, c: make(chan struct{})}
	stop := watchStore(s, errc)
	select {
	case err := <-errc:
		t.Fatalf("a healthy store stopped the process: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	s.err = fmt.Errorf("fsync of directory /data/blobs: %w", blob.ErrStoreFailed)
	close(s.c)
	select {
	case err := <-errc:
		if !errors.Is(err, blob.ErrStoreFailed) {
			t.Errorf("errc got %v, want the store's failure", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a failed store did not stop the process")
	}
	stop()

	healthy := &failingStoreC{failingStore: failingStore{Store: memstore.New()}, c: make(chan struct{})}
	watchStore(healthy, errc)() // stops and waits; goleak checks nothing is left
}

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
