package server

import (
	"context"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// Every writer of a server charges one presence budget, of
// Config.PresenceBudgetBytes, and /metrics reports what it holds: a
// gauge, with no label per shard.
func TestPresenceBudgetIsSharedAndExported(t *testing.T) {
	const budget = 4 << 10
	reg := prometheus.NewRegistry()
	ts := startServer(t, Config{Store: memstore.New(), Registerer: reg, PresenceBudgetBytes: budget})
	ctx := context.Background()
	for i := range 40 {
		if _, err := appendOne(ctx, ts.client, fmt.Sprint("s", i%8), fmt.Sprint("id", i)); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	DebugHandler(reg, false).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`(?m)^rolloutd_presence_bytes (\S+)$`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatal("/metrics lacks rolloutd_presence_bytes, unlabelled")
	}
	held, err := strconv.ParseFloat(m[1], 64)
	if err != nil || held <= 0 || held > budget {
		t.Fatalf("rolloutd_presence_bytes %s, want some, at most the budget %d, held by 8 writers", m[1], budget)
	}
	if !regexp.MustCompile(`(?m)^rolloutd_presence_sheds_total \d+$`).MatchString(rec.Body.String()) {
		t.Fatal("/metrics lacks rolloutd_presence_sheds_total, unlabelled")
	}
}
