package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob/localstore"
)

// TestLocalBarrierFlag: --local-barrier (or ROLLOUTD_LOCAL_BARRIER) picks
// how the embedded store makes groups durable, reaches the store that
// serve opens, and is refused by name where it cannot apply.
func TestLocalBarrierFlag(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil || c.LocalBarrier != localstore.BarrierFsync {
		t.Fatalf("default: %v, %v; want fsync", c, err)
	}
	c, err = parseConfig([]string{"--local-barrier", "syncfs"}, env(), io.Discard)
	if err != nil || c.LocalBarrier != localstore.BarrierSyncfs {
		t.Fatalf("--local-barrier syncfs: %v, %v", c, err)
	}
	dir := t.TempDir()
	c, err = parseConfig([]string{"--store", dir}, env("ROLLOUTD_LOCAL_BARRIER", "auto"), io.Discard)
	if err != nil || c.LocalBarrier != localstore.BarrierAuto {
		t.Fatalf("ROLLOUTD_LOCAL_BARRIER=auto: %v, %v", c, err)
	}
	s, closeStore, err := openStore(context.Background(), c, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	if got := s.(*localstore.Store).Barrier(); got != localstore.BarrierAuto {
		t.Fatalf("the store serve opened uses barrier %s, want auto", got)
	}

	for _, tc := range []struct {
		args []string
		env  func(string) string
		want []string
	}{
		{[]string{"--local-barrier", "fast"}, env(), []string{"-local-barrier", `"fast"`, "fsync, auto, syncfs"}},
		{[]string{"--store", "azblob://rollouts", "--local-barrier", "auto"}, env("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true"),
			[]string{"--local-barrier auto", "embedded store", "azblob://rollouts"}},
	} {
		_, err := parseConfig(tc.args, tc.env, io.Discard)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, w)
			}
		}
	}
}
