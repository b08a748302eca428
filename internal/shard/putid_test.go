package shard

import (
	"fmt"
	"math"
	"testing"
)

// TestNextPutIDFormat: put ids read as fmt's "%s-%d" of the writer's id and
// its counter, whatever the counter's width.
func TestNextPutIDFormat(t *testing.T) {
	w := &writer{id: "0123456789abcdef"}
	for _, n := range []uint64{0, 8, 98, 12345, math.MaxUint64 - 1} {
		w.puts.Store(n)
		if got, want := w.nextPutID(), fmt.Sprintf("%s-%d", w.id, n+1); got != want {
			t.Fatalf("nextPutID after %d: %q, want %q", n, got, want)
		}
	}
}
