package main

import (
	"io"
	"strings"
	"testing"

	"github.com/rolloutd/rolloutd/internal/server"
)

// --presence-budget-bytes sets the server's presence budget, 64 MiB by
// default; it must be positive.
func TestPresenceBudgetFlag(t *testing.T) {
	c, err := parseConfig(nil, env(), io.Discard)
	if err != nil || int64(c.PresenceBytes) != server.DefaultPresenceBudgetBytes {
		t.Fatalf("default: %v, %v; want %d", c, err, server.DefaultPresenceBudgetBytes)
	}
	c, err = parseConfig([]string{"--presence-budget-bytes", "8MiB"}, env(), io.Discard)
	if err != nil || c.PresenceBytes != 8<<20 {
		t.Fatalf("--presence-budget-bytes 8MiB: %v, %v", c, err)
	}
	var s server.Config
	c.applyCaches(&s)
	if s.PresenceBudgetBytes != 8<<20 || s.IndexCacheBytes != server.DefaultIndexCacheBytes {
		t.Fatalf("server config: presence budget %d, index cache %d", s.PresenceBudgetBytes, s.IndexCacheBytes)
	}
	if _, err := parseConfig([]string{"--presence-budget-bytes", "0"}, env(), io.Discard); err == nil || !strings.Contains(err.Error(), "--presence-budget-bytes") {
		t.Fatalf("--presence-budget-bytes 0: %v, want an error naming the flag", err)
	}
}
