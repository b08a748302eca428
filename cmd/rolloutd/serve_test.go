package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// failingStore is a store that can fail for good, like the local store.
// It stays a hand-written wrapper: what it adds is the Failed method (and
// FailedC), which a faultstore must not have, or every faultstore would be
// a store that can fail for good.
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

// A start that fails (its port is in use) leaves no data directory behind,
// and never removes one that was there before it.
func TestFailedStartLeavesNoNewStoreDir(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	root := t.TempDir()
	existing := filepath.Join(root, "existing")
	if err := os.Mkdir(existing, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ store, gone, kept string }{
		{filepath.Join(root, "new", "data"), filepath.Join(root, "new"), root},
		{existing, "", existing},
	} {
		out, err := exec.Command(binary, "--listen", taken.Addr().String(), "--metrics-listen", "127.0.0.1:0", "--store", tc.store).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "address already in use") {
			t.Fatalf("--store %s with the port taken: %v\n%s", tc.store, err, out)
		}
		if _, err := os.Stat(tc.gone); tc.gone != "" && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("--store %s: the failed start left %s (stat: %v)", tc.store, tc.gone, err)
		}
		if _, err := os.Stat(tc.kept); err != nil {
			t.Errorf("--store %s: %s, there before, is gone: %v", tc.store, tc.kept, err)
		}
	}
}

// warnIfEmpty warns about a store without shards only.
func TestWarnIfEmpty(t *testing.T) {
	store := memstore.New()
	cfg := &config{store: storeLocation{Dir: "/data/rollouts"}}
	warned := func() []observer.LoggedEntry {
		core, logs := observer.New(zapcore.WarnLevel)
		warnIfEmpty(context.Background(), store, cfg, zap.New(core))
		return logs.All()
	}
	if got := warned(); len(got) != 1 || got[0].ContextMap()["store"] != "file:///data/rollouts" || !strings.Contains(got[0].Message, "check --store") {
		t.Errorf("an empty store: %v, want one warning naming the store", got)
	}
	if _, err := store.Put(context.Background(), format.ShardsRoot+"s/_manifest", []byte("m"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := warned(); len(got) != 0 {
		t.Errorf("a store with a shard: %v, want no warning", got)
	}
}

// Both log encoders write a duration as the console always did, "10s",
// never JSON's bare seconds.
func TestLogDurations(t *testing.T) {
	for _, format := range []string{"json", "console"} {
		zc := loggerConfig(format, zapcore.InfoLevel)
		enc := zapcore.NewConsoleEncoder(zc.EncoderConfig)
		if zc.Encoding == "json" {
			enc = zapcore.NewJSONEncoder(zc.EncoderConfig)
		}
		buf, err := enc.EncodeEntry(zapcore.Entry{Message: "shutdown: signal received"}, []zapcore.Field{zap.Duration("timeout", 10*time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if line := buf.String(); !regexp.MustCompile(`"timeout": ?"10s"`).MatchString(line) {
			t.Errorf("%s: %q, want the timeout as \"10s\"", format, line)
		}
	}
}

// closeProbe is a listener whose Close reports whether dir still existed.
type closeProbe struct {
	net.Listener
	dir       string
	dirAtStop *bool
}

func (p closeProbe) Close() error {
	_, err := os.Stat(p.dir)
	*p.dirAtStop = err == nil
	return nil
}

// A failed start removes the directory it created while it still holds its
// ports, as it did before serve was split: a restarted rolloutd waiting for
// the ports cannot have created the directory anew by then.
func TestFailedStartRemovesTheDirBeforeFreeingThePorts(t *testing.T) {
	created := filepath.Join(t.TempDir(), "new")
	if err := os.Mkdir(created, 0o750); err != nil {
		t.Fatal(err)
	}
	var dirAtStop bool
	probe := closeProbe{dir: created, dirAtStop: &dirAtStop}
	abandonStart(&listeners{grpc: probe, metrics: probe}, created, zap.NewNop())
	if dirAtStop {
		t.Error("the listeners were closed while the created directory was still there")
	}
	if _, err := os.Stat(created); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the created directory is still there: %v", err)
	}
}
