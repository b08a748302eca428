package subscribe

import (
	"testing"
	"time"
)

// A shard deleted and re-created before its reader reads it again is
// still reported deleted, before the new incarnation's records: whether
// its reader was parked (written elsewhere, idle) or polling.
func TestDeletedAndRecreatedAtOnceIsReported(t *testing.T) {
	for _, local := range []bool{false, true} {
		o := fast
		o.IdleAfter = 50 * time.Millisecond
		v := newEnv(t, o)
		tail := v.appendN("d/x", 3, local)
		s := v.subscribe(Request{Prefix: "d"})
		s.reached(t, "d/x", tail)
		time.Sleep(100 * time.Millisecond) // parked
		v.remove("d/x")
		again := v.appendN("d/x", 2, local)
		s.reached(t, "d/x", again)
		s.stop(t)
		if got := s.deleted["d/x"]; len(got) != 1 || got[0] != tail {
			t.Errorf("local %v: deletions reported at cursors %v, want [%d]", local, got, tail)
		}
	}
}
