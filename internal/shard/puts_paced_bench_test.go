package shard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// slowStore stands in for Azurite in the PUT accounting of a lone client:
// it serves one call at a time, each taking lat, so that the writer's
// time-driven work (checkpoints, edit delays, merges) meets appends at the
// rate a real store allows, which the in-memory store's instant calls
// hide. It counts calls, PUTs by what they write, as they arrive.
type slowStore struct {
	counts map[string]*faultstore.Counter
	last   map[string]int64 // the counts at the last snapshot
}

func newSlowStore(inner blob.Store, lat time.Duration) (*faultstore.Store, *slowStore) {
	fs := faultstore.New(inner, 1)
	var serve sync.Mutex // one call at a time, as Azurite serves them
	fs.Intercept(faultstore.Match{}, func(ctx context.Context, _ faultstore.Call) error {
		serve.Lock()
		defer serve.Unlock()
		t := time.NewTimer(lat)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	put := func(f func(name string) bool) faultstore.Match {
		return faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, If: func(c faultstore.Call) bool { return f(c.Name) }}
	}
	isManifest := func(n string) bool { return strings.HasSuffix(n, "/_manifest") }
	isLog := func(n string) bool { return !isManifest(n) && strings.Contains(n, "/_l/") }
	isMerge := func(n string) bool { return !isManifest(n) && !isLog(n) && strings.Contains(n, "/_g/") }
	ops := func(ops ...faultstore.Op) faultstore.Match { return faultstore.Match{Ops: ops} }
	s := &slowStore{counts: map[string]*faultstore.Counter{
		"manifest": fs.Count(put(isManifest)),
		"log":      fs.Count(put(isLog)),
		"merge":    fs.Count(put(isMerge)),
		"other":    fs.Count(put(func(n string) bool { return !isManifest(n) && !isLog(n) && !isMerge(n) })),
		"get":      fs.Count(ops(faultstore.OpGet, faultstore.OpHead)),
		"delete":   fs.Count(ops(faultstore.OpDelete)),
		"list":     fs.Count(ops(faultstore.OpList)),
	}, last: map[string]int64{}}
	return fs, s
}

// snapshot returns the counts since the last snapshot.
func (s *slowStore) snapshot() map[string]int {
	c := map[string]int{}
	for k, n := range s.counts {
		v := n.N()
		c[k], s.last[k] = int(v-s.last[k]), v
	}
	return c
}

// BenchmarkPutsPerAppendPaced is BenchmarkPutsPerAppend at a real store's
// pace: a lone protocol v2 client appends 1 KiB records to a store that
// serves one call at a time, 1.5 ms each (about Azurite's pace), and the
// blob writes are counted, as rolloutbench's row 1g counts them, from
// before the first append to a 1 s settle after the last. "blocks" appends
// as rolloutbench's target 1 does: blocks of 10, and between two of them
// the time three other phases' blocks and four 50 ms gaps take (250 ms);
// "steady" appends back to back. The metrics split the PUTs by what they
// write:
//
//	log/append         log creates (batches and fences)
//	ckpt/append        manifest CASes (checkpoints)
//	merge/append       merge outputs
//	puts/append        all of them
//	gens               live generations at the end of the settle
//	maxgens            the most live generations seen after an append
//
//	go test -run '^$' -bench PutsPerAppendPaced -benchtime 300x ./internal/shard
func BenchmarkPutsPerAppendPaced(b *testing.B) {
	for _, mode := range []struct {
		name  string
		block int
		gap   time.Duration
	}{
		{"blocks", 10, 250 * time.Millisecond},
		{"steady", 0, 0},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			s, counts := newSlowStore(memstore.New(), 1500*time.Microsecond)
			w, err := Open(ctx, s, "s", Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Abort()
			rec := record("x")
			rec.Content = strings.Repeat("x", 1024)
			counts.snapshot()
			fences := w.Stats().Fences
			maxGens := 0
			n := 0
			for b.Loop() {
				if mode.block > 0 && n > 0 && n%mode.block == 0 {
					time.Sleep(mode.gap)
				}
				rec.Id = fmt.Sprint("r", n)
				e, err := Prepare(rec, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Append(ctx, []Entry{e}); err != nil {
					b.Fatal(err)
				}
				n++
				maxGens = max(maxGens, w.Stats().Generations)
			}
			b.StopTimer()
			time.Sleep(time.Second)
			st := w.Stats()
			c := counts.snapshot()
			if err := w.Close(ctx); err != nil {
				b.Fatal(err)
			}
			closing := counts.snapshot()
			per := func(k int) float64 { return float64(k) / float64(n) }
			puts := c["log"] + c["manifest"] + c["merge"] + c["other"]
			b.Logf("%d appends: %d log creates (%d fences), %d checkpoint CASes, %d merge outputs, %d other PUTs, %d DELETEs, %d GETs; "+
				"%d live generations (at most %d), %d merges, %d checkpoints; Close then wrote %d PUTs",
				n, c["log"], st.Fences-fences, c["manifest"], c["merge"], c["other"], c["delete"], c["get"],
				st.Generations, maxGens, st.Merges, st.Checkpoints, closing["log"]+closing["manifest"]+closing["merge"])
			b.ReportMetric(per(puts), "puts/append")
			b.ReportMetric(per(c["log"]), "log/append")
			b.ReportMetric(per(c["manifest"]), "ckpt/append")
			b.ReportMetric(per(c["merge"]), "merge/append")
			b.ReportMetric(per(c["delete"]), "deletes/append")
			b.ReportMetric(float64(st.Generations), "gens")
			b.ReportMetric(float64(maxGens), "maxgens")
		})
	}
}
