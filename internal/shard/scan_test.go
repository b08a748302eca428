package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// scanAll collects a whole scan's records and checks its cursors.
func scanAll(t *testing.T, r *Reader, shard string, opts ScanOptions) []*rolloutv1.Record {
	t.Helper()
	var out []*rolloutv1.Record
	last := opts.AfterSeq
	err := r.Scan(context.Background(), shard, opts, func(b Batch) error {
		if b.Cursor <= last && len(b.Records) > 0 {
			t.Errorf("batch cursor %d did not move past %d", b.Cursor, last)
		}
		for _, rec := range b.Records {
			if rec.GetSeq() > b.Cursor {
				t.Errorf("record seq %d beyond its batch cursor %d", rec.GetSeq(), b.Cursor)
			}
		}
		last = b.Cursor
		out = append(out, b.Records...)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out
}

func TestScanEqualsAckedInOrderAcrossMerges(t *testing.T) {
	backends(t, func(t *testing.T, newStore func(testing.TB) blob.Store) {
		store := newStore(t)
		w, err := Open(context.Background(), store, "s", mergeOptions(t))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		l := newLedger()
		var stop atomic.Bool
		var wg sync.WaitGroup
		for c := range 3 {
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					rs, err := w.Append(context.Background(), entries(t, fmt.Sprintf("c%d-%d", c, i)))
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					l.add(t, rs)
				}
			})
		}
		reader := NewReader(store, ReaderOptions{})
		// Scans run while appends and merges go on; each must be a gap-free,
		// strictly increasing prefix of the shard.
		scans := 0
		for w.Stats().Merges < 5 || scans < 5 {
			got := scanAll(t, reader, "s", ScanOptions{BatchRecords: 7})
			for i, rec := range got {
				if rec.GetSeq() != uint64(i+1) {
					t.Fatalf("scan %d: record %d has seq %d; a scan must be gap-free and in order", scans, i, rec.GetSeq())
				}
			}
			scans++
		}
		stop.Store(true)
		wg.Wait()
		got := scanAll(t, reader, "s", ScanOptions{})
		if len(got) != len(l.acks) {
			t.Fatalf("scan returned %d records, %d acked", len(got), len(l.acks))
		}
		for _, rec := range got {
			if ack, ok := l.acks[rec.GetId()]; !ok || ack.Seq != rec.GetSeq() {
				t.Fatalf("scanned %q seq %d, acked %+v", rec.GetId(), rec.GetSeq(), ack)
			}
		}
		t.Logf("%d scans during %d merges; final scan %d records", scans, w.Stats().Merges, len(got))
	})
}

func TestScanResumesFromEveryCursor(t *testing.T) {
	store := memstore.New()
	w := open(t, store, "s")
	for i := range 12 {
		if _, err := w.Append(context.Background(), entries(t, ids(fmt.Sprint("b", i), 1+i%3)...)); err != nil {
			t.Fatal(err)
		}
	}
	reader := NewReader(store, ReaderOptions{})
	all := scanAll(t, reader, "s", ScanOptions{})
	for cur := 0; cur <= len(all); cur++ {
		got := scanAll(t, reader, "s", ScanOptions{AfterSeq: uint64(cur), BatchRecords: 3})
		if len(got) != len(all)-cur {
			t.Fatalf("after %d: %d records, want %d", cur, len(got), len(all)-cur)
		}
		for i, rec := range got {
			if rec.GetId() != all[cur+i].GetId() {
				t.Fatalf("after %d: record %d is %q, want %q", cur, i, rec.GetId(), all[cur+i].GetId())
			}
		}
	}
}

func TestScanRawMatchesDecoded(t *testing.T) {
	store := memstore.New()
	w := open(t, store, "s")
	for i := range 30 {
		if _, err := w.Append(context.Background(), entries(t, ids(fmt.Sprint("b", i), 2)...)); err != nil {
			t.Fatal(err)
		}
	}
	reader := NewReader(store, ReaderOptions{})
	want := scanAll(t, reader, "s", ScanOptions{AfterSeq: 5})
	var got []*rolloutv1.Record
	err := reader.Scan(context.Background(), "s", ScanOptions{AfterSeq: 5, Raw: true, Limit: 50, BatchRecords: 8}, func(b Batch) error {
		if len(b.Records) != 0 {
			t.Errorf("raw scan decoded %d records", len(b.Records))
		}
		for _, raw := range b.Raw {
			r := &rolloutv1.Record{}
			if err := proto.Unmarshal(raw, r); err != nil {
				return err
			}
			got = append(got, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 50 {
		t.Fatalf("raw scan with limit 50 gave %d records", len(got))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("raw record %d = %v, decoded %v", i, got[i], want[i])
		}
	}
	if err := reader.Scan(context.Background(), "s", ScanOptions{Raw: true, Filter: func(*rolloutv1.Record) bool { return true }}, func(Batch) error { return nil }); err == nil {
		t.Fatal("a raw scan with a filter was accepted")
	}
}

func TestScanFilterAndLimit(t *testing.T) {
	store := memstore.New()
	w := open(t, store, "s")
	for i := range 20 {
		if _, err := w.Append(context.Background(), entries(t, fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	reader := NewReader(store, ReaderOptions{})
	odd := func(r *rolloutv1.Record) bool { return r.GetSeq()%2 == 1 }
	got := scanAll(t, reader, "s", ScanOptions{Filter: odd, Limit: 4})
	if len(got) != 4 || got[0].GetSeq() != 1 || got[3].GetSeq() != 7 {
		t.Fatalf("filtered, limited scan = %d records starting %d", len(got), got[0].GetSeq())
	}
	var cursors []uint64
	err := reader.Scan(context.Background(), "s", ScanOptions{Filter: func(*rolloutv1.Record) bool { return false }}, func(b Batch) error {
		cursors = append(cursors, b.Cursor)
		return nil
	})
	if err != nil || len(cursors) == 0 || cursors[len(cursors)-1] != 20 {
		t.Fatalf("a scan that filters everything must still report its cursor: %v, %v", cursors, err)
	}
	if err := reader.Scan(context.Background(), "nope", ScanOptions{}, func(Batch) error { return nil }); !errors.Is(err, ErrShardNotFound) {
		t.Fatalf("scan of an unwritten shard: %v", err)
	}
}

// follow collects what a following scan delivers until it has n records.
func follow(t *testing.T, r *Reader, shard string, opts ScanOptions, n int) (<-chan []*rolloutv1.Record, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan []*rolloutv1.Record, 1)
	opts.Follow = true
	go func() {
		var got []*rolloutv1.Record
		err := r.Scan(ctx, shard, opts, func(b Batch) error {
			got = append(got, b.Records...)
			if len(got) >= n {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("follow ended with %v", err)
		}
		out <- got
	}()
	return out, cancel
}

func TestFollowSeesEveryCommitOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local bool // the follower shares the writer's Notifier
	}{{"same instance", true}, {"other instance", false}} {
		t.Run(tc.name, func(t *testing.T) {
			store := memstore.New()
			n := NewNotifier()
			opts := testOptions(t)
			opts.Notifier = n
			w, err := Open(context.Background(), store, "s", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if _, err := w.Append(context.Background(), entries(t, "before")); err != nil {
				t.Fatal(err)
			}
			sopts := ScanOptions{AfterSeq: 1, PollMin: 5 * time.Millisecond, PollMax: 20 * time.Millisecond}
			if tc.local {
				sopts.Notifier = n
				sopts.PollMin, sopts.PollMax = time.Hour, time.Hour // only the notifier can wake it
			}
			got, cancel := follow(t, NewReader(store, ReaderOptions{}), "s", sopts, 30)
			defer cancel()
			for i := range 30 {
				if _, err := w.Append(context.Background(), entries(t, fmt.Sprint("live-", i))); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case recs := <-got:
				if len(recs) != 30 {
					t.Fatalf("follow delivered %d records, want 30", len(recs))
				}
				for i, r := range recs {
					if r.GetId() != fmt.Sprint("live-", i) || r.GetSeq() != uint64(i+2) {
						t.Fatalf("record %d = %q seq %d", i, r.GetId(), r.GetSeq())
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatal("follow did not deliver the commits")
			}
		})
	}
}

// A batch stays within BatchBytes (each record counted with its framing in
// the delivered message) unless it holds a single larger record, and it is
// sized by the records after Project, in both raw and decoded scans.
func TestScanBatchBytes(t *testing.T) {
	store := memstore.New()
	w := open(t, store, "s")
	defer w.Abort()
	// Record sizes in KiB, in seq order: small ones around large ones.
	sizes := []int{100, 300, 700, 50, 2000, 10, 10, 900, 200, 1500, 5}
	for i, kib := range sizes {
		rec := &rolloutv1.Record{Id: fmt.Sprintf("r%02d", i), Content: string(make([]byte, kib<<10))}
		e, err := Prepare(rec, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Append(context.Background(), []Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	reader := NewReader(store, ReaderOptions{})
	const limit = 1 << 20
	framed := func(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }
	check := func(t *testing.T, opts ScanOptions) (batches int) {
		t.Helper()
		var seen int
		err := reader.Scan(context.Background(), "s", opts, func(b Batch) error {
			batches++
			size, n := 0, len(b.Records)+len(b.Raw)
			for _, r := range b.Raw {
				size += framed(len(r))
			}
			for _, r := range b.Records {
				size += framed(proto.Size(r))
			}
			if size > limit && n > 1 {
				t.Errorf("batch %d: %d records of %d bytes in all, over BatchBytes %d", batches, n, size, limit)
			}
			seen += n
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen != len(sizes) {
			t.Errorf("scan delivered %d records, want %d", seen, len(sizes))
		}
		return batches
	}
	t.Run("raw", func(t *testing.T) { check(t, ScanOptions{Raw: true, BatchBytes: limit}) })
	t.Run("decoded", func(t *testing.T) {
		check(t, ScanOptions{Filter: func(*rolloutv1.Record) bool { return true }, BatchBytes: limit})
	})
	t.Run("projected", func(t *testing.T) {
		idOnly := func(r *rolloutv1.Record) { r.Content, r.CreatedAt = "", nil }
		if n := check(t, ScanOptions{Project: idOnly, BatchBytes: limit}); n != 1 {
			t.Errorf("ids only: %d batches, want 1 (they are sized by the bytes delivered)", n)
		}
	})
}
