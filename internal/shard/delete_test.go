package shard

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

func appendIDs(t *testing.T, w *Writer, ids ...string) []Result {
	t.Helper()
	rs, err := w.Append(context.Background(), entries(t, ids...))
	if err != nil {
		t.Fatalf("Append(%v): %v", ids, err)
	}
	return rs
}

// generationBlobs lists the shard's generation blobs by epoch.
func generationBlobs(t *testing.T, store blob.Store, shard string) map[uint64]int {
	t.Helper()
	out := map[uint64]int{}
	page, err := store.List(context.Background(), blob.ListOptions{Prefix: format.GenerationPrefix(shard)})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range page.Items {
		e, _, ok := format.ParseGenerationName(shard, it.Name)
		if ok {
			out[e]++
		}
	}
	return out
}

// The tombstone is a claim: it fences the live writer, reads of the old
// records answer deleted, and the next writer starts the next incarnation
// with seqs above the deleted ones. Purge then removes the old blobs only.
func TestDeleteFencesAndStartsNextIncarnation(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	w1 := open(t, store, "exp/a")
	old := appendIDs(t, w1, "a", "b")
	appendIDs(t, w1, "c")

	d, err := Delete(ctx, store, "exp/a", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.LastSeq != 3 || d.Records != 3 || d.Incarnation != 1 || d.AlreadyDeleted {
		t.Fatalf("Delete = %+v, want last seq 3, 3 records, incarnation 1", d)
	}
	raw, _, err := store.Get(ctx, format.ManifestName("exp/a"), blob.GetOptions{})
	if err != nil || format.Version(raw) != format.TombstoneVersion {
		t.Fatalf("tombstone written at version %d (%v), want %d", format.Version(raw), err, format.TombstoneVersion)
	}
	if _, err := w1.Append(ctx, entries(t, "d")); !errors.Is(err, ErrFenced) {
		t.Fatalf("Append on the old incarnation's writer = %v, want ErrFenced", err)
	}
	r := NewReader(store, ReaderOptions{})
	for _, id := range []string{"a", "b", "c"} {
		if _, err := r.Get(ctx, "exp/a", id); !errors.Is(err, ErrShardDeleted) {
			t.Errorf("Get(%q) after the delete = %v, want ErrShardDeleted", id, err)
		}
	}
	if _, err := r.Describe(ctx, "exp/a"); !errors.Is(err, ErrShardDeleted) {
		t.Errorf("Describe after the delete = %v, want ErrShardDeleted", err)
	}
	if err := r.Scan(ctx, "exp/a", ScanOptions{}, func(Batch) error { return nil }); !errors.Is(err, ErrShardDeleted) {
		t.Errorf("Scan after the delete = %v, want ErrShardDeleted", err)
	}
	if _, err := r.BatchGet(ctx, "exp/a", []string{"a"}, BatchGetOptions{}); !errors.Is(err, ErrShardDeleted) {
		t.Errorf("BatchGet after the delete = %v, want ErrShardDeleted", err)
	}
	again, err := Delete(ctx, store, "exp/a", DeleteOptions{})
	if err != nil || !again.AlreadyDeleted || again.LastSeq != 3 || again.ThroughEpoch != d.ThroughEpoch {
		t.Fatalf("second Delete = %+v, %v: want already deleted, same boundary", again, err)
	}

	w2 := open(t, store, "exp/a")
	fresh := appendIDs(t, w2, "a", "e")
	if fresh[0].Seq <= old[len(old)-1].Seq+1-1 || fresh[0].Seq != 4 || fresh[0].AlreadyPresent {
		t.Fatalf("next incarnation's first append = %+v, want a new record at seq 4", fresh[0])
	}
	info, err := r.Describe(ctx, "exp/a")
	if err != nil || info.Incarnation != 1 || info.Records != 2 || info.FirstSeq != 4 || info.LastSeq != 5 ||
		info.FormatVersion != format.ManifestVersionV2 || info.Created.IsZero() || info.LastCommit.IsZero() {
		t.Fatalf("Describe of the next incarnation = %+v, %v", info, err)
	}
	if got, err := r.Get(ctx, "exp/a", "a"); err != nil || got.GetSeq() != 4 {
		t.Fatalf("Get(a) in the next incarnation = %v, %v", got, err)
	}
	if _, err := r.Get(ctx, "exp/a", "b"); !errors.Is(err, ErrRecordNotFound) {
		t.Fatalf("Get(b), deleted, in the next incarnation = %v, want ErrRecordNotFound", err)
	}

	before := generationBlobs(t, store, "exp/a")
	n, err := Purge(ctx, store, "exp/a", d.ThroughEpoch, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := generationBlobs(t, store, "exp/a")
	for e, c := range before {
		switch {
		case e <= d.ThroughEpoch && after[e] != 0:
			t.Errorf("epoch %d: %d generation blobs left after the purge", e, after[e])
		case e > d.ThroughEpoch && after[e] != c:
			t.Errorf("epoch %d of the next incarnation: %d blobs before the purge, %d after", e, c, after[e])
		}
	}
	if n == 0 {
		t.Fatal("Purge deleted nothing")
	}
	if _, err := r.Get(ctx, "exp/a", "e"); err != nil {
		t.Fatalf("Get(e) after the purge: %v", err)
	}
}

func TestDeleteExpectedLastSeq(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	w := open(t, store, "s")
	appendIDs(t, w, "a", "b")
	stale := uint64(1)
	_, err := Delete(ctx, store, "s", DeleteOptions{ExpectedLastSeq: &stale})
	var mm *SeqMismatchError
	if !errors.As(err, &mm) || mm.LastSeq != 2 {
		t.Fatalf("Delete with a stale expected seq = %v, want a SeqMismatchError naming 2", err)
	}
	appendIDs(t, w, "c") // still the live writer: nothing was written
	cur := uint64(3)
	if _, err := Delete(ctx, store, "s", DeleteOptions{ExpectedLastSeq: &cur}); err != nil {
		t.Fatalf("Delete with the current last seq: %v", err)
	}
	if _, err := Delete(ctx, memstore.New(), "never", DeleteOptions{}); !errors.Is(err, ErrShardNotFound) {
		t.Fatalf("Delete of a shard never written = %v, want ErrShardNotFound", err)
	}
}

// A delete whose CAS answer is lost is decided by reading the manifest
// back: it succeeds once, not twice.
func TestDeleteLostResponse(t *testing.T) {
	ctx := context.Background()
	fs := faultstore.New(memstore.New(), 1)
	w := open(t, fs, "s")
	appendIDs(t, w, "a")
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.ManifestName("s"), Fault: faultstore.LoseResponse, Count: 1})
	d, err := Delete(ctx, fs, "s", DeleteOptions{RetryBackoff: time.Millisecond})
	if err != nil || d.AlreadyDeleted || d.Records != 1 || d.Incarnation != 1 {
		t.Fatalf("Delete with a lost answer = %+v, %v: want this call's delete", d, err)
	}
}

// A purge cut short by failing deletes (a crash mid-deletion) is finished
// by the next one, and never touches the next incarnation.
func TestPurgeCrashThenResume(t *testing.T) {
	ctx := context.Background()
	fs := faultstore.New(memstore.New(), 1)
	opts := testOptions(t)
	opts.DisableBackground = true // keep every generation a blob of its own
	w, err := Open(ctx, fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		appendIDs(t, w, fmt.Sprintf("old-%d", i))
	}
	w.Abort()
	d, err := Delete(ctx, fs, "s", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := Open(ctx, fs, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Abort()
	for i := range 5 {
		appendIDs(t, w2, fmt.Sprintf("new-%d", i))
	}
	fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpDelete}, Fault: faultstore.Fail, Skip: 10})
	n, err := Purge(ctx, fs, "s", d.ThroughEpoch, nil)
	if err == nil || n >= 40 {
		t.Fatalf("Purge with failing deletes = %d, %v: want it cut short", n, err)
	}
	fs.Clear()
	m, err := Purge(ctx, fs, "s", d.ThroughEpoch, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n+m < 40 {
		t.Fatalf("purged %d then %d, want all 40 old generations", n, m)
	}
	left := generationBlobs(t, fs, "s")
	for e, c := range left {
		if e <= d.ThroughEpoch {
			t.Errorf("epoch %d: %d old blobs left", e, c)
		}
	}
	r := NewReader(fs, ReaderOptions{})
	for i := range 5 {
		if _, err := r.Get(ctx, "s", fmt.Sprintf("new-%d", i)); err != nil {
			t.Errorf("Get(new-%d) after the purges: %v", i, err)
		}
	}
}

// The Purger runs purges in the background and Close stops and waits for
// them (goleak in TestMain checks nothing is left).
func TestPurgerStartAndClose(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	w := open(t, store, "s")
	for i := range 5 {
		appendIDs(t, w, fmt.Sprintf("x-%d", i))
	}
	d, err := Delete(ctx, store, "s", DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The old writer's merger may still write a generation until it finds
	// itself fenced (under protocol v2 the merger, not a commit, merges);
	// a blob written after the purge is left to the next one.
	w.Abort()
	p := NewPurger(store, 2, nil)
	p.Start("s", d.ThroughEpoch)
	p.Start("s", d.ThroughEpoch) // coalesced with the one running
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if left := generationBlobs(t, store, "s"); len(left) != 0 {
		t.Fatalf("blobs left after the background purge: %v", left)
	}
	p.Start("s", d.ThroughEpoch) // after Close: ignored
}

// A following scan of the old incarnation ends with ErrShardDeleted; one
// started after the delete waits for the shard to be written again and
// sees only the new records, with seqs above the deleted ones.
func TestFollowAcrossDeleteAndRecreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memstore.New()
	r := NewReader(store, ReaderOptions{})
	w := open(t, store, "s")
	appendIDs(t, w, "a")
	follow := ScanOptions{Follow: true, PollMin: time.Millisecond, PollMax: 5 * time.Millisecond}
	var mu sync.Mutex
	var got1 []string
	done1 := make(chan error, 1)
	go func() {
		done1 <- r.Scan(ctx, "s", follow, func(b Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, rec := range b.Records {
				got1 = append(got1, rec.GetId())
			}
			return nil
		})
	}()
	waitFor(t, "follower", func() bool { mu.Lock(); defer mu.Unlock(); return len(got1) == 1 })
	if _, err := Delete(ctx, store, "s", DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done1:
		if !errors.Is(err, ErrShardDeleted) {
			t.Fatalf("following scan across the delete ended with %v, want ErrShardDeleted", err)
		}
	case <-ctx.Done():
		t.Fatal("following scan did not end at the delete")
	}

	var got2 []uint64
	done2 := make(chan error, 1)
	sctx, stop := context.WithCancel(ctx)
	go func() {
		done2 <- r.Scan(sctx, "s", follow, func(b Batch) error {
			mu.Lock()
			defer mu.Unlock()
			for _, rec := range b.Records {
				got2 = append(got2, rec.GetSeq())
			}
			return nil
		})
	}()
	time.Sleep(20 * time.Millisecond) // it polls the tombstone meanwhile
	w2 := open(t, store, "s")
	appendIDs(t, w2, "b", "c")
	waitFor(t, "follower", func() bool { mu.Lock(); defer mu.Unlock(); return len(got2) == 2 })
	stop()
	if err := <-done2; !errors.Is(err, context.Canceled) {
		t.Fatalf("second follower ended with %v", err)
	}
	if got2[0] != 2 || got2[1] != 3 {
		t.Fatalf("re-created shard's follower saw seqs %v, want [2 3]", got2)
	}
}

// ListShards pages through 2,500 shards under a prefix, 100 at a time,
// with neighbours outside it, nested shards and a tombstone: nothing
// missing, nothing repeated, in storage-name order. The store's half, the
// same paging on every backend, is blobtest's ListDelimitedManyPrefixes.
func TestListShardsPagination(t *testing.T) {
	stores := map[string]func(testing.TB) blob.Store{
		"memstore": func(testing.TB) blob.Store { return memstore.New() },
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := newStore(t)
			var want []string
			var names []string
			for i := range 2500 {
				s := fmt.Sprintf("exp/a%04d", i)
				want = append(want, s)
				names = append(names, format.ManifestName(s))
				if i%250 == 0 {
					names = append(names, format.GenerationName(s, 1, 1), format.GenerationName(s, 1, 2))
				}
			}
			want = append(want, "exp", "exp/a0007/nested")
			names = append(names, format.ManifestName("exp"), format.GenerationName("exp", 1, 1), format.ManifestName("exp/a0007/nested"),
				format.ManifestName("exp-x"), format.ManifestName("exp0"), format.ManifestName("expo/a"), format.ManifestName("other"))
			putAll(t, store, names)
			sort.Slice(want, func(i, j int) bool { return want[i]+"/_" < want[j]+"/_" })
			for _, prefix := range []string{"exp", "exp/"} {
				var got []string
				token := ""
				for pages := 0; ; pages++ {
					p, err := ListShards(ctx, store, prefix, token, 100)
					if err != nil {
						t.Fatal(err)
					}
					if len(p.Shards) > 100 || pages > 100 {
						t.Fatalf("page of %d shards, page %d", len(p.Shards), pages)
					}
					got = append(got, p.Shards...)
					if p.Next == "" {
						break
					}
					token = p.Next
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Fatalf("ListShards(%q): %d shards, want %d (first difference at %d)", prefix, len(got), len(want), firstDifference(got, want))
				}
			}
			if _, err := ListShards(ctx, store, "other", "bm90IGEgdG9rZW4", 10); !errors.Is(err, ErrBadPageToken) {
				t.Fatalf("ListShards with a foreign token = %v", err)
			}
			all, err := ListShards(ctx, store, "", "", 1000)
			if err != nil || len(all.Shards) == 0 || all.Shards[0] != "exp-x" {
				t.Fatalf("ListShards(\"\") first page = %v, %v: want exp-x first (\"a-x\" lists before \"a\")", all.Shards[:min(3, len(all.Shards))], err)
			}
		})
	}
}

func putAll(t *testing.T, store blob.Store, names []string) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(names))
	for _, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := store.Put(context.Background(), n, []byte("x"), blob.PutOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A page token is the client's to send back: any bytes decode to an
// error or to a token that round-trips, never a panic.
func FuzzDecodePageToken(f *testing.F) {
	f.Add("exp", "id", encodePageToken("exp", "id", "exp/a"))
	f.Add("", "", "")
	f.Add("x", "", "not base64!")
	f.Fuzz(func(t *testing.T, prefix, caller, token string) {
		last, err := decodePageToken(token, prefix, caller)
		if err != nil {
			if !errors.Is(err, ErrBadPageToken) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if token != "" && encodePageToken(prefix, caller, last) != token && !strings.Contains(prefix, "\x00") {
			// Strict base64 has one encoding per byte string.
			t.Fatalf("token %q decodes to %q, which encodes to %q", token, last, encodePageToken(prefix, caller, last))
		}
	})
}
