package shard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// slowStore stands in for Azurite in the PUT accounting of a lone client:
// it serves one call at a time, each taking lat, so that the writer's
// time-driven work (checkpoints, edit delays, merges) meets appends at the
// rate a real store allows, which the in-memory store's instant calls
// hide. It counts PUTs by what they write.
type slowStore struct {
	blob.Store
	lat time.Duration

	serve sync.Mutex // one call at a time, as Azurite serves them

	mu     sync.Mutex
	counts map[string]int
}

func newSlowStore(inner blob.Store, lat time.Duration) *slowStore {
	return &slowStore{Store: inner, lat: lat, counts: map[string]int{}}
}

func (s *slowStore) wait(ctx context.Context) error {
	s.serve.Lock()
	defer s.serve.Unlock()
	t := time.NewTimer(s.lat)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowStore) count(kind string) {
	s.mu.Lock()
	s.counts[kind]++
	s.mu.Unlock()
}

// snapshot returns the counts so far and resets them.
func (s *slowStore) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts
	s.counts = map[string]int{}
	return c
}

func (s *slowStore) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	switch {
	case strings.HasSuffix(name, "/_manifest"):
		s.count("manifest")
	case strings.Contains(name, "/_l/"):
		s.count("log")
	case strings.Contains(name, "/_g/"):
		s.count("merge")
	default:
		s.count("other")
	}
	if err := s.wait(ctx); err != nil {
		return blob.Attrs{}, err
	}
	return s.Store.Put(ctx, name, data, opts)
}

func (s *slowStore) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	s.count("get")
	if err := s.wait(ctx); err != nil {
		return nil, blob.Attrs{}, err
	}
	return s.Store.Get(ctx, name, opts)
}

func (s *slowStore) Head(ctx context.Context, name string) (blob.Attrs, error) {
	s.count("get")
	if err := s.wait(ctx); err != nil {
		return blob.Attrs{}, err
	}
	return s.Store.Head(ctx, name)
}

func (s *slowStore) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	s.count("delete")
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Delete(ctx, name, opts)
}

func (s *slowStore) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	s.count("list")
	if err := s.wait(ctx); err != nil {
		return blob.ListPage{}, err
	}
	return s.Store.List(ctx, opts)
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
			s := newSlowStore(memstore.New(), 1500*time.Microsecond)
			w, err := Open(ctx, s, "s", Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Abort()
			rec := record("x")
			rec.Content = strings.Repeat("x", 1024)
			s.snapshot()
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
			c := s.snapshot()
			if err := w.Close(ctx); err != nil {
				b.Fatal(err)
			}
			closing := s.snapshot()
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
