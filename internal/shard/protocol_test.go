package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
)

// Tests of protocol v2 (commit by create), issue 21 sections 3-6.

// logGate holds the creates of log positions made by the writer it is
// armed for: a held create waits, unsent, until released, and one whose
// sender gives up meanwhile lands then, as a request on the wire does. It
// pauses one writer exactly where its create would go out, with no sleeps.
type logGate struct {
	s    *faultstore.Store
	gate *faultstore.Gate
}

func newLogGate(inner blob.Store) *logGate {
	return &logGate{s: faultstore.New(inner, 1)}
}

func (g *logGate) holdLog(w *Writer) {
	id := w.w.id
	g.gate = g.s.Hold(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, If: func(c faultstore.Call) bool {
		writer, _, _ := strings.Cut(c.PutOpts.PutID, "-")
		return strings.Contains(c.Name, "/_l/") && writer == id
	}}, faultstore.LandsLate)
}

// held returns the name of the next held create.
func (g *logGate) held(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := g.gate.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c.Name
}

// open lets the held creates go out, and those whose senders gave up land,
// before it returns.
func (g *logGate) open() { g.gate.Release() }

// logEntries reads every log entry of the shard that storage holds.
func logEntries(t *testing.T, store blob.Store, shard string) map[uint64]*shardlog.Entry {
	t.Helper()
	ctx := context.Background()
	page, err := store.List(ctx, blob.ListOptions{Prefix: format.LogPrefix(shard)})
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]*shardlog.Entry{}
	for _, it := range page.Items {
		p, ok := format.ParseLogName(shard, it.Name)
		if !ok {
			t.Fatalf("unexpected blob %s in the log", it.Name)
		}
		e, err := shardlog.NewSource(store, NewBlobCache(1<<20), shard).Entry(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = e
	}
	return out
}

func fences(entries map[uint64]*shardlog.Entry) (ps []uint64) {
	for p, e := range entries {
		if e.Fence() {
			ps = append(ps, p)
		}
	}
	return ps
}

// SlateDB #352, #1622, PR #1672: a new writer fences, commits, checkpoints
// and merges; GC collects the log positions the checkpoint covers; then
// the stale writer, paused just before its create, goes on. Its create
// must fail, because the fence at that position is kept, and it must not
// ack: a record acknowledged there would be one that no reader ever sees.
func TestStaleWriterAfterGCFindsTheFenceKept(t *testing.T) {
	gate := newLogGate(memstore.New())
	ctx := context.Background()
	l := newLedger()
	a := open(t, gate.s, "s")
	rs, err := a.Append(ctx, entries(t, "a0"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)

	// A pauses exactly where its next create goes out.
	gate.holdLog(a)
	staleErr := make(chan error, 1)
	go func() {
		rs, err := a.Append(ctx, entries(t, "stale"))
		if err == nil {
			l.add(t, rs)
		}
		staleErr <- err
	}()
	pos := gate.held(t) // position 2, not yet sent

	// B takes over: its fence lands at the position A's create is for.
	opts := collectingOptions(t)
	b, err := Open(ctx, gate.s, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Abort()
	if got := fences(logEntries(t, gate.s.Inner(), "s")); len(got) != 1 || format.LogName("s", got[0]) != pos {
		t.Fatalf("fences %v after the takeover, want one at %s", got, pos)
	}
	// B commits, checkpoints, merges, and GC collects the positions the
	// checkpoints cover, until the merged records are all in _g/.
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		rs, err := b.Append(ctx, entries(t, fmt.Sprint("b", i)))
		if err != nil {
			t.Fatal(err)
		}
		l.add(t, rs)
		if _, err := gate.s.Inner().Head(ctx, format.LogName("s", 1)); errors.Is(err, blob.ErrNotFound) && b.Stats().Merges > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GC never collected log position 1")
		}
		time.Sleep(5 * time.Millisecond) // GC deletes a second after a merge retires
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// A goes on after its pause.
	gate.open()
	err = <-staleErr
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("the stale writer's create after GC: %v, want ErrFenced", err)
	}
	if got := fences(logEntries(t, gate.s.Inner(), "s")); len(got) != 1 {
		t.Fatalf("fences %v after GC, want the one B wrote", got)
	}
	l.verify(t, gate.s.Inner(), "s")
}

// A reopen in the same process, after a writer that ended with every create
// answered, writes no fence: fences count takeovers, not opens.
func TestReopenWithNothingInDoubtWritesNoFence(t *testing.T) {
	for _, end := range []string{"close", "abort"} {
		t.Run(end, func(t *testing.T) {
			store := memstore.New()
			ctx := context.Background()
			opts := testOptions(t)
			opts.Lineage = NewLineage()
			l := newLedger()
			for i := range 4 {
				w, err := Open(ctx, store, "s", opts)
				if err != nil {
					t.Fatal(err)
				}
				rs, err := w.Append(ctx, entries(t, fmt.Sprint("x", i)))
				if err != nil {
					t.Fatal(err)
				}
				l.add(t, rs)
				if n := w.Stats().Fences; n != 0 {
					t.Errorf("open %d wrote %d fences, want none", i, n)
				}
				if end == "close" {
					if err := w.Close(ctx); err != nil {
						t.Fatal(err)
					}
				} else {
					w.Abort()
				}
			}
			if got := fences(logEntries(t, store, "s")); len(got) != 0 {
				t.Fatalf("fences at %v, want none", got)
			}
			// Another process (no shared Lineage) must fence.
			w, err := Open(ctx, store, "s", testOptions(t))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if n := w.Stats().Fences; n != 1 {
				t.Errorf("a takeover by another process wrote %d fences, want 1", n)
			}
			l.verify(t, store, "s")
		})
	}
}

// A reopen in the same process after an Abort that left a create in doubt
// fences, like a takeover. The create lands late: before the new writer's
// probe (the new writer inherits it, and a retry of its ids finds them
// present), or after the fence (it fails, and a retry stores them).
func TestReopenAfterAbortWithACreateInDoubtFences(t *testing.T) {
	for _, late := range []string{"before the probe", "after the fence"} {
		t.Run(late, func(t *testing.T) {
			inner := memstore.New()
			gate := newLogGate(inner)
			ctx := context.Background()
			opts := testOptions(t)
			opts.Lineage = NewLineage()
			l := newLedger()
			w1, err := Open(ctx, gate.s, "s", opts)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := w1.Append(ctx, entries(t, "a"))
			if err != nil {
				t.Fatal(err)
			}
			l.add(t, rs)
			gate.holdLog(w1)
			doubt := make(chan error, 1)
			go func() { _, err := w1.Append(ctx, entries(t, "x")); doubt <- err }()
			gate.held(t)
			// The eviction path: Abort, with no I/O, while the create is out.
			aborted := make(chan struct{})
			go func() { w1.Abort(); close(aborted) }()
			if err := <-doubt; !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("append whose create was in flight at Abort: %v, want ErrOutcomeUnknown", err)
			}
			<-aborted
			if late == "before the probe" {
				gate.open()
			}
			w2, err := Open(ctx, gate.s, "s", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Abort()
			if n := w2.Stats().Fences; n != 1 {
				t.Fatalf("reopen after a create in doubt wrote %d fences, want 1", n)
			}
			if late == "after the fence" {
				gate.open()
			}
			rs, err = w2.Append(ctx, entries(t, "x", "y"))
			if err != nil {
				t.Fatal(err)
			}
			if late == "before the probe" && !rs[0].AlreadyPresent {
				t.Errorf("retry of x, whose create landed late before the reopen: %+v, want AlreadyPresent", rs[0])
			}
			if late == "after the fence" && rs[0].AlreadyPresent {
				t.Errorf("retry of x, whose create the fence failed: %+v, want stored now", rs[0])
			}
			for _, r := range rs {
				if !r.AlreadyPresent {
					l.add(t, []Result{r})
				}
			}
			if late == "before the probe" {
				l.add(t, rs[:1])
			}
			if err := w2.Close(ctx); err != nil {
				t.Fatal(err)
			}
			l.verify(t, inner, "s")
		})
	}
}

// The claim race (issue 21 section 4, SlateDB PR #1682): a writer whose
// claim landed is paused before its confirming CAS while another claims
// the shard and fences after its fence. Its confirming CAS must fail, and
// it claims again after the other, rather than commit under an epoch that
// is no longer current.
func TestClaimRaceConfirmLosesToALaterClaim(t *testing.T) {
	inner := memstore.New()
	release := make(chan struct{})
	ctx := context.Background()
	l := newLedger()
	w0 := open(t, inner, "s")
	rs, err := w0.Append(ctx, entries(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)
	w0.Abort()

	// Hold the first manifest put after a fence: A's confirming CAS.
	var once sync.Once
	confirmHeld := make(chan struct{})
	hs := faultstore.New(inner, 1)
	hs.Intercept(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}}, func(_ context.Context, c faultstore.Call) error {
		if strings.HasSuffix(c.Name, "/_manifest") && len(fences(logEntries(t, inner, "s"))) == 1 {
			once.Do(func() { close(confirmHeld); <-release })
		}
		return nil
	})
	type opened struct {
		w   *Writer
		err error
	}
	aDone := make(chan opened, 1)
	go func() {
		w, err := Open(ctx, hs, "s", testOptions(t))
		aDone <- opened{w, err}
	}()
	<-confirmHeld
	b := open(t, inner, "s") // claims epoch 3, fences after A's fence
	close(release)
	a := <-aDone
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.w.Abort()
	if a.w.Epoch() <= b.Epoch() {
		t.Fatalf("A proceeded with epoch %d after B claimed %d; want it to claim again after B", a.w.Epoch(), b.Epoch())
	}
	if _, err := b.Append(ctx, entries(t, "b")); !errors.Is(err, ErrFenced) {
		t.Fatalf("B after A claimed again: %v, want ErrFenced", err)
	}
	rs, err = a.w.Append(ctx, entries(t, "c"))
	if err != nil {
		t.Fatal(err)
	}
	l.add(t, rs)
	l.verify(t, inner, "s")
}

// A log position that a merge retired and GC collected may be created
// again by a create still in flight: a fence that lands late. A reader
// holding a manifest that lists the batch there unmerged must not take
// the fence's bytes for it (a corrupt record, or a record not found): the
// put id the manifest lists tells them apart, and the reader reads the
// manifest again, which lists the merged copy.
func TestReaderTellsALateFenceFromTheListedBatch(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	opts := collectingOptions(t)
	w, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	rs, err := w.Append(ctx, entries(t, "x"))
	if err != nil {
		t.Fatal(err)
	}
	r := NewReader(store, ReaderOptions{})
	waitFor(t, "a checkpoint that lists position 1", func() bool {
		m, _, err := shardlog.ReadManifest(ctx, store, "s")
		return err == nil && len(m.GetGenerations()) > 0 && m.GetGenerations()[0].GetPosition() == 1
	})
	if _, err := r.Get(ctx, "s", "x"); err != nil { // caches that manifest and the batch's index
		t.Fatal(err)
	}
	old, _, err := store.Get(ctx, format.ManifestName("s"), blob.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		if _, err := w.Append(ctx, entries(t, fmt.Sprint("y", i))); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Head(ctx, format.LogName("s", 1)); errors.Is(err, blob.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GC never collected log position 1")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The late fence lands in the collected position.
	l, err := format.EncodeFence(format.LogEntry{Shard: "s", Epoch: 7, Position: 1, Writer: "late", PutID: "late-1", NextSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, format.LogName("s", 1), l.Data, blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Get(ctx, "s", "x")
	if err != nil || got.GetSeq() != rs[0].Seq {
		t.Fatalf("Get(x) with a late fence in its collected position: %v, %v; want seq %d", got, err, rs[0].Seq)
	}
	// A reader whose manifest reads (the first and the confirming one)
	// both happened before the merge's checkpoint: it reads position 1
	// after GC and the late fence.
	stale := staleManifests(store, old, 2)
	got, err = NewReader(stale, ReaderOptions{}).Get(ctx, "s", "x")
	if err != nil || got.GetSeq() != rs[0].Seq {
		t.Fatalf("Get(x) on a manifest that lists the collected batch: %v, %v; want seq %d", got, err, rs[0].Seq)
	}
}

// staleManifests serves old as the manifest to the first n (> 0) reads.
func staleManifests(inner blob.Store, old []byte, n int) *faultstore.Store {
	s := faultstore.New(inner, 1)
	s.AnswerGet(faultstore.Match{Suffix: "/_manifest", Count: n}, func(c faultstore.Call) ([]byte, blob.Attrs, error) {
		return old, blob.Attrs{Name: c.Name, Size: int64(len(old)), ETag: "old"}, nil
	})
	return s
}

// Under protocol v2 a delete claims and fences the log like a writer: the
// expected last seq is checked against the log's tail up to that fence
// (records no checkpoint lists yet count), a stale writer's next create
// fails on the fence, and the purge deletes the old incarnation's batches
// but keeps every fence.
func TestDeleteFencesTheLogAndPurgeKeepsFences(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	opts := testOptions(t)
	opts.CheckpointEvery = 1000
	opts.CheckpointInterval = time.Hour
	opts.DisableBackground = true
	w, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	appendIDs(t, w, "a", "b")
	appendIDs(t, w, "c") // seqs 1..3, in the log, no checkpoint lists them
	if m, _, _ := shardlog.ReadManifest(ctx, store, "s"); m.GetNextSeq() != 1 {
		t.Fatalf("the checkpoint already holds next seq %d; the test wants the records in the log alone", m.GetNextSeq())
	}
	stale := uint64(1)
	if _, err := Delete(ctx, store, "s", DeleteOptions{ExpectedLastSeq: &stale}); !errors.Is(err, ErrSeqMismatch) {
		t.Fatalf("Delete expecting seq 1 with 3 in the log: %v, want ErrSeqMismatch", err)
	}
	last := uint64(3)
	d, err := Delete(ctx, store, "s", DeleteOptions{ExpectedLastSeq: &last})
	if err != nil || d.LastSeq != 3 || d.Records != 3 {
		t.Fatalf("Delete expecting seq 3: %+v, %v", d, err)
	}
	if _, err := w.Append(ctx, entries(t, "late")); !errors.Is(err, ErrFenced) {
		t.Fatalf("the old incarnation's writer after the delete: %v, want ErrFenced", err)
	}
	fenced := fences(logEntries(t, store, "s"))
	if len(fenced) != 1 {
		t.Fatalf("fences after the delete: %v, want the tombstone's", fenced)
	}
	if _, err := Purge(ctx, store, "s", d.ThroughEpoch, nil); err != nil {
		t.Fatal(err)
	}
	left := logEntries(t, store, "s")
	for p, e := range left {
		if !e.Fence() {
			t.Errorf("purge left the batch at log position %d", p)
		}
	}
	if len(fences(left)) != len(fenced) {
		t.Errorf("purge deleted fences: %v left of %v", fences(left), fenced)
	}
	// The next incarnation starts after the tombstone's fence: it probes
	// none of the old incarnation's log, and creates nothing at or below
	// the fence, where the purge left holes.
	w2 := open(t, store, "s")
	if rs := appendIDs(t, w2, "a"); rs[0].Seq != 4 || rs[0].AlreadyPresent || rs[0].Generation <= fenced[0] {
		t.Fatalf("the next incarnation's first append: %+v, want a new record at seq 4, past the tombstone's fence at position %d", rs[0], fenced[0])
	}
}

// An independent review's scenario: a v2 writer acks a record that only the
// log holds; the shard is deleted; the writer appends again (nothing on the
// v2 ack path reads the manifest). The delete's fence must fail that
// append, and the next incarnation must inherit none of the deleted
// records.
func TestDeleteStopsAV2WriterAndNothingResurrects(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	opts := testOptions(t)
	opts.CheckpointEvery = 64
	opts.CheckpointInterval = time.Hour
	opts.DisableBackground = true
	w1, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Abort()
	appendIDs(t, w1, "before-delete")
	if _, err := Delete(ctx, store, "s", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Append(ctx, entries(t, "after-delete")); !errors.Is(err, ErrFenced) {
		t.Fatalf("append by the deleted incarnation's writer: %v, want ErrFenced", err)
	}
	r := NewReader(store, ReaderOptions{})
	for _, id := range []string{"before-delete", "after-delete"} {
		if _, err := r.Get(ctx, "s", id); !errors.Is(err, ErrShardDeleted) {
			t.Errorf("Get(%q) after the delete: %v, want ErrShardDeleted", id, err)
		}
	}
	w2, err := Open(ctx, store, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	if n := w2.Stats().Records; n != 0 {
		t.Fatalf("the next incarnation's writer sees %d records; deleted records resurrect", n)
	}
}

// A reader's probe finds a position missing that an acked record was
// committed at, because a checkpoint covered it and GC collected it since
// the reader cached the shard. The manifest GET sent after the probe
// returned shows the checkpoint past the missing position, and the reader
// starts again from it: the record is found, not reported missing.
func TestReaderConfirmsAMissingPositionWithTheManifest(t *testing.T) {
	store := memstore.New()
	ctx := context.Background()
	opts := collectingOptions(t)
	frozen := faultstore.New(store, 1)
	w, err := Open(ctx, frozen, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	appendIDs(t, w, "first")
	r := NewReader(store, ReaderOptions{})
	if _, err := r.Get(ctx, "s", "first"); err != nil { // caches the shard with "first" in its tail
		t.Fatal(err)
	}
	rs := appendIDs(t, w, "x") // acked before the Get below begins
	deadline := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		appendIDs(t, w, fmt.Sprint("y", i))
		if _, err := store.Head(ctx, format.LogName("s", rs[0].Generation)); errors.Is(err, blob.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("GC never collected x's log position")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// "late" lands past the last checkpoint, and no checkpoint covers it:
	// the reader finds it only by probing on from the new checkpoint.
	// No checkpoint lands from now on: what the writer commits stays in
	// the log's tail.
	frozen.Fail(faultstore.Match{Ops: []faultstore.Op{faultstore.OpPut}, Suffix: "/_manifest"},
		fmt.Errorf("manifest writes frozen by the test: %w", blob.ErrUnavailable))
	late := appendIDs(t, w, "late")
	got, err := r.Get(ctx, "s", "late")
	if err != nil || got.GetSeq() != late[0].Seq {
		t.Fatalf("Get(late), acked past the checkpoint that covers the missing position: %v, %v; want seq %d", got, err, late[0].Seq)
	}
	got, err = r.Get(ctx, "s", "x")
	if err != nil || got.GetSeq() != rs[0].Seq {
		t.Fatalf("Get(x) after its log position was collected: %v, %v; want seq %d", got, err, rs[0].Seq)
	}
}

// collectingOptions are mergeOptions that checkpoint every two positions
// and let GC collect what merges retire at once, so a test sees log
// positions covered, merged and deleted within milliseconds.
func collectingOptions(t testing.TB) Options {
	opts := mergeOptions(t)
	opts.CheckpointEvery = 2
	opts.CheckpointInterval = 5 * time.Millisecond
	opts.RetireGrace = time.Millisecond
	return opts
}
