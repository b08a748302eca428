package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// getGate counts GETs and, once armed, holds a conditional manifest GET
// until a record's ranged GET has been served, proving the two overlap.
type getGate struct {
	s    *faultstore.Store
	gets *faultstore.Counter
	mu   sync.Mutex
	// read counts the GETs of each blob while armed.
	read map[string]int
}

func newGetGate(inner blob.Store) (*faultstore.Store, *getGate) {
	s := faultstore.New(inner, 1)
	return s, &getGate{s: s, gets: s.Count(faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet}})}
}

func (g *getGate) arm() {
	gets := []faultstore.Op{faultstore.OpGet}
	g.s.Intercept(faultstore.Match{Ops: gets}, func(_ context.Context, c faultstore.Call) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.read == nil {
			g.read = map[string]int{}
		}
		g.read[c.Name]++
		return nil
	})
	rec := make(chan struct{}) // closed when a ranged GET of a generation was served
	g.s.OnLanded(faultstore.Match{Ops: gets, If: func(c faultstore.Call) bool { return c.GetOpts.Length > 0 }, Count: 1}, func(faultstore.Call) { close(rec) })
	conditional := func(c faultstore.Call) bool { return c.GetOpts.IfNoneMatch != "" }
	g.s.Intercept(faultstore.Match{Ops: gets, Suffix: "/_manifest", If: conditional}, func(context.Context, faultstore.Call) error {
		select {
		case <-rec:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("test: the manifest read did not overlap a record read")
		}
	})
}

// A Get whose record the cached manifest and index already locate sends the
// ranged GET beside its reads of the manifest: it probes the log position
// after its cached tail (which the record read overlaps), then confirms
// with the conditional manifest GET: three GETs in two rounds.
func TestGetOverlapsTheRecordReadWithTheManifestRead(t *testing.T) {
	const want = 3
	store, gate := newGetGate(memstore.New())
	opts := testOptions(t)
	w, err := Open(context.Background(), store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	l := newLedger()
	rs, err := w.Append(context.Background(), entries(t, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)
	r := NewReader(store, ReaderOptions{})
	if _, err := r.Get(context.Background(), "s", "a"); err != nil { // warms the caches
		t.Fatal(err)
	}
	gate.arm()
	before := gate.gets.N()
	rec, err := r.Get(context.Background(), "s", "b")
	if err != nil {
		t.Fatal(err)
	}
	if rec.GetId() != "b" || rec.GetSeq() != l.acks["b"].Seq {
		t.Fatalf("Get(b) = id %q seq %d, want seq %d", rec.GetId(), rec.GetSeq(), l.acks["b"].Seq)
	}
	if n := gate.gets.N() - before; n != want {
		t.Fatalf("warm Get made %d GETs, want %d", n, want)
	}
}

// The record read early stands only if the current manifest still lists
// its generation.
func TestGetChecksAnEarlyReadAgainstTheManifest(t *testing.T) {
	for _, tc := range []struct {
		name string
		// change acts after the reader cached the manifest that locates a0.
		change  func(t *testing.T, store blob.Store, w *Writer, l *ledger)
		wantErr error
		// wantGets, when set, is how many GETs the second Get may make.
		wantGets int64
	}{
		{"shard gone", func(t *testing.T, store blob.Store, _ *Writer, _ *ledger) {
			if err := store.Delete(context.Background(), format.ManifestName("s"), blob.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, ErrShardNotFound, 0},
		{"generation merged away and deleted", func(t *testing.T, store blob.Store, w *Writer, l *ledger) {
			old := l.acks["a0"]
			for _, id := range []string{"a2", "a3"} { // the fourth log batch: the merger merges a0..a3
				rs, err := w.Append(context.Background(), entries(t, id))
				if err != nil {
					t.Fatal(err)
				}
				l.add(t, rs)
			}
			waitFor(t, "the merge", func() bool { return w.Stats().Merges == 1 })
			// As GC does once the grace period is over.
			if err := store.Delete(context.Background(), format.LogName("s", old.Generation), blob.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, nil, 0},
		{"manifest changed, generation still live", func(t *testing.T, _ blob.Store, w *Writer, l *ledger) {
			rs, err := w.Append(context.Background(), entries(t, "other")) // a third log batch: no merge yet
			if err != nil {
				t.Fatal(err)
			}
			l.add(t, rs)
		}, nil, 5}, // nothing read twice: see below
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, gate := newGetGate(memstore.New())
			// Log batches merge four at a time (2K), and never for being
			// idle in the test's time.
			opts := testOptions(t)
			opts.CheckpointEvery = 2
			opts.MergeInterval = time.Hour
			w, err := Open(context.Background(), store, "s", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			l := newLedger()
			for _, id := range []string{"a0", "a1"} {
				rs, err := w.Append(context.Background(), entries(t, id))
				if err != nil {
					t.Fatal(err)
				}
				l.add(t, rs)
			}
			r := NewReader(store, ReaderOptions{})
			if _, err := r.Get(context.Background(), "s", "a0"); err != nil {
				t.Fatal(err)
			}
			tc.change(t, store, w, l)
			// The early read is served before the manifest read, so only
			// the check after it can refuse its result.
			gate.arm()
			before := gate.gets.N()
			rec, err := r.Get(context.Background(), "s", "a0")
			// On the log, "manifest changed" is one new log batch: the
			// read probes position 3 (found), then 4 and 5 at once (the
			// probe window doubles; both missing), confirms with the
			// conditional manifest GET, and reads a0's record once.
			if n := gate.gets.N() - before; tc.wantGets > 0 && n != tc.wantGets {
				t.Errorf("Get(a0) made %d GETs, want %d", n, tc.wantGets)
			}
			gate.mu.Lock()
			for name, n := range gate.read {
				if n != 1 && tc.wantGets > 0 {
					t.Errorf("Get(a0) read %s %d times, want once", name, n)
				}
			}
			gate.mu.Unlock()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Get(a0) = %v, %v; want %v", rec, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.GetSeq() != l.acks["a0"].Seq {
				t.Fatalf("Get(a0) seq %d, want %d", rec.GetSeq(), l.acks["a0"].Seq)
			}
		})
	}
}
