package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The compatibility fixture: a shard written by protocol v1 (manifest format
// version 1, commit by manifest CAS), as the build before "Commit by create"
// left it. Its blobs sit under compatDir/store by blob name, and the records a
// Get returns, in seq order, in compatDir/records.json. It is regenerated
// only by that older code: TestWriteCompatFixture of the builds through
// 615b413, the last that could commit by protocol v1 (ROLLOUTD_WRITE_FIXTURE=1
// with it checked out). Every later build must open, read and append to it
// unchanged.
const (
	compatDir   = "testdata/compat-v1"
	compatShard = "compat/v1"
)

// compatNow is the receive time the fixture's server-filled created_at
// fields were given, so that its entries can be prepared again identically.
var compatNow = time.Unix(1764600000, 0).UTC()

// compatAppend is one Append the fixture's writers made: records by index
// into compatRecord, and the request id when the append carried one (the
// records then have no id of their own, as a client sends them).
type compatAppend struct {
	epoch     int // the writer (1, 2, 3) that made it
	records   []int
	requestID string
}

var compatAppends = []compatAppend{
	{epoch: 1, records: []int{0, 1}},
	{epoch: 1, records: []int{2}, requestID: "req-epoch1"},
	{epoch: 1, records: []int{3, 4, 5}},
	{epoch: 2, records: []int{6}},
	{epoch: 2, records: []int{7, 8}, requestID: "req-epoch2"},
	{epoch: 3, records: []int{9}},
}

// compatRecord is the i-th record as the client sent it: every field of
// rollout.v1.Record set, except seq (output only) and, for some, the fields
// the server fills (an id from the request id, created_at).
func compatRecord(i int) *rolloutv1.Record {
	f := func(x float32) *float32 { return &x }
	r := &rolloutv1.Record{
		Id:                fmt.Sprintf("rec-%02d", i),
		RolloutId:         fmt.Sprintf("rollout-%d", i/3),
		ProblemId:         fmt.Sprintf("problem-%d", i%4),
		Dataset:           "gsm8k",
		SequenceOrder:     int32(i + 1),
		Role:              rolloutv1.Role(1 + i%6),
		CreatedAt:         timestamppb.New(time.Unix(1700000000+int64(i), int64(i)*1000).UTC()),
		Content:           fmt.Sprintf("content of record %d: ünïcode ✓", i),
		ContentType:       "text/plain",
		InputTokens:       []int32{int32(i), 1, 2, 3},
		OutputTokens:      []int32{7, 8, int32(i)},
		OutputLogprobs:    []float32{-0.5, -1.25, float32(-i-1) / 8},
		RefLogprobs:       []float32{-0.75, -1, -2},
		LossMask:          []byte{1, 0, 1},
		Reward:            f(float32(i+1) / 4),
		Advantage:         f(-0.125),
		Score:             f(0.5),
		PolicyVersion:     fmt.Sprintf("policy-%d", i%2),
		IncludeInTraining: i%2 == 0,
		GraderId:          "grader-a",
		Relationships:     []*rolloutv1.Relationship{{TargetId: fmt.Sprintf("rec-%02d", max(i-1, 0)), Relation: "reply_to", Weight: 0.25}},
		Metadata:          map[string]string{"k": fmt.Sprint(i), "env": "fixture"},
		BinaryPayload:     []byte{0, 1, 2, byte(i), 0xff},
	}
	if i%3 == 1 {
		r.CreatedAt = nil // filled by the server: compatNow
	}
	return r
}

// compatEntries prepares a's records as the server did.
func compatEntries(t testing.TB, a compatAppend) []Entry {
	t.Helper()
	out := make([]Entry, len(a.records))
	for j, i := range a.records {
		rec, id := compatRecord(i), ""
		if a.requestID != "" {
			rec.Id = ""
			id = DeriveID(compatShard, a.requestID, j)
		}
		e, err := PrepareWithID(rec, id, compatNow)
		if err != nil {
			t.Fatal(err)
		}
		out[j] = e
	}
	return out
}

// loadCompatFixture copies the fixture's blobs into store and returns the
// records it holds, in seq order.
func loadCompatFixture(t *testing.T, store blob.Store) []*rolloutv1.Record {
	t.Helper()
	ctx := context.Background()
	root := filepath.Join(compatDir, "store")
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		_, err = store.Put(ctx, filepath.ToSlash(rel), data, blob.PutOptions{IfNoneMatch: true})
		return err
	})
	if err != nil {
		t.Fatalf("load %s: %v", root, err)
	}
	raw, err := os.ReadFile(filepath.Join(compatDir, "records.json"))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		t.Fatal(err)
	}
	want := make([]*rolloutv1.Record, len(msgs))
	for i, m := range msgs {
		want[i] = &rolloutv1.Record{}
		if err := protojson.Unmarshal(m, want[i]); err != nil {
			t.Fatalf("records.json[%d]: %v", i, err)
		}
	}
	n2 := 0
	for _, a := range compatAppends {
		n2 += len(a.records)
	}
	if len(want) != n2 || n < 4 {
		t.Fatalf("fixture holds %d records in %d blobs, want %d records", len(want), n, n2)
	}
	return want
}

// TestCompatFixtureShape checks that the fixture still covers what it is
// for: several epochs, a merged generation, and retired generations whose
// blobs are present; and that it was written at manifest format version 1.
func TestCompatFixtureShape(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(compatDir, "store", filepath.FromSlash(format.ManifestName(compatShard))))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 8 || !bytes.Equal(data[4:8], []byte{1, 0, 0, 0}) {
		t.Fatalf("fixture manifest is not format version 1: % x", data[:min(len(data), 8)])
	}
	m, err := format.DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetEpoch() != 3 || len(m.GetEpochs()) < 2 {
		t.Errorf("epoch %d with %d epoch records, want epoch 3 and at least 2 records", m.GetEpoch(), len(m.GetEpochs()))
	}
	merged := slices.ContainsFunc(m.GetGenerations(), func(g *storagepb.Generation) bool { return g.GetLevel() > 0 })
	if !merged {
		t.Error("no merged generation in the fixture")
	}
	// Read from the stored fields, not through the package's helpers, so
	// that this check does not move with the code under test.
	retired := 0
	for _, b := range m.GetRetiredRuns() {
		for i, epoch := range b.GetEpochs() {
			for n := range b.GetCounts()[i] {
				retired++
				name := format.GenerationName(compatShard, epoch, b.GetFirsts()[i]+n)
				if _, err := os.Stat(filepath.Join(compatDir, "store", filepath.FromSlash(name))); err != nil {
					t.Errorf("retired generation %s: %v", name, err)
				}
			}
		}
	}
	if retired == 0 {
		t.Error("no retired generation in the fixture")
	}
}

// TestCompatFixture opens the protocol-v1 fixture with this build: a writer
// opens it, every record reads back by Get and Scan as stored, a resent
// append of fixture records is AlreadyPresent (by id and by request id, not
// stored twice), and new appends continue its sequence and read back, also
// after a second writer takes the shard over.
func TestCompatFixture(t *testing.T) {
	stores := map[string]func(t *testing.T) blob.Store{
		"memstore": func(*testing.T) blob.Store { return memstore.New() },
		"localstore": func(t *testing.T) blob.Store {
			s, err := localstore.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	// The first claim converts the shard: it writes format version 2.
	for name, newStore := range stores {
		t.Run("v2/"+name, func(t *testing.T) { testCompatFixture(t, newStore) })
	}
}

func testCompatFixture(t *testing.T, newStore func(*testing.T) blob.Store) {
	open := func(t *testing.T, store blob.Store, shard string) *Writer {
		t.Helper()
		opts := testOptions(t)
		w, err := Open(context.Background(), store, shard, opts)
		if err != nil {
			t.Fatalf("Open(%q): %v", shard, err)
		}
		t.Cleanup(w.Abort)
		return w
	}
	{
		{
			ctx := context.Background()
			store := newStore(t)
			want := loadCompatFixture(t, store)

			w := open(t, store, compatShard)
			checkCompatReads(t, store, want)

			// Every fixture append, resent: each record AlreadyPresent at
			// its stored seq.
			bySeq := map[string]uint64{}
			for _, r := range want {
				bySeq[r.GetId()] = r.GetSeq()
			}
			for _, a := range compatAppends {
				rs, err := w.Append(ctx, compatEntries(t, a))
				if err != nil {
					t.Fatalf("resend %+v: %v", a, err)
				}
				for _, r := range rs {
					if !r.AlreadyPresent || r.Seq != bySeq[r.ID] {
						t.Errorf("resent %q: %+v, want AlreadyPresent at seq %d", r.ID, r, bySeq[r.ID])
					}
				}
			}
			checkCompatReads(t, store, want)

			// New appends continue the sequence.
			next := want[len(want)-1].GetSeq() + 1
			more := []compatAppend{{records: []int{10, 11}}, {records: []int{12}, requestID: "req-new"}}
			for _, a := range more {
				rs, err := w.Append(ctx, compatEntries(t, a))
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rs {
					if r.AlreadyPresent || r.Seq != next {
						t.Errorf("new append %q: %+v, want seq %d", r.ID, r, next)
					}
					next++
				}
			}
			all := slices.Clone(want)
			for _, a := range more {
				for j, e := range compatEntries(t, a) {
					rec := compatRecord(a.records[j])
					rec.Id = e.ID
					rec.Seq = uint64(len(all) + 1)
					if rec.CreatedAt == nil {
						rec.CreatedAt = timestamppb.New(compatNow)
					}
					all = append(all, rec)
				}
			}
			checkCompatReads(t, store, all)
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}

			// A second writer takes over what the first converted.
			w2 := open(t, store, compatShard)
			rs, err := w2.Append(ctx, compatEntries(t, compatAppends[1]))
			if err != nil || !rs[0].AlreadyPresent {
				t.Fatalf("resend after takeover: %+v, %v", rs, err)
			}
			checkCompatReads(t, store, all)
			if err := w2.Close(ctx); err != nil {
				t.Fatal(err)
			}
			raw, _, err := store.Get(ctx, format.ManifestName(compatShard), blob.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v, want := format.Version(raw), uint32(format.ManifestVersionV2); v != want {
				t.Errorf("manifest format version %d after this build's writers, want %d", v, want)
			}
		}
	}
}

// checkCompatReads reads want back through a fresh Reader, by Get and by
// Scan, which must deliver exactly want in seq order.
func checkCompatReads(t *testing.T, store blob.Store, want []*rolloutv1.Record) {
	t.Helper()
	ctx := context.Background()
	r := NewReader(store, ReaderOptions{})
	for i, w := range want {
		if w.GetSeq() != uint64(i+1) {
			t.Fatalf("expected records not in seq order at %d: %d", i, w.GetSeq())
		}
		got, err := r.Get(ctx, compatShard, w.GetId())
		if err != nil {
			t.Errorf("Get(%q): %v", w.GetId(), err)
			continue
		}
		if !proto.Equal(got, w) {
			t.Errorf("Get(%q) =\n%v\nwant\n%v", w.GetId(), got, w)
		}
	}
	var got []*rolloutv1.Record
	err := r.Scan(ctx, compatShard, ScanOptions{BatchRecords: 3}, func(b Batch) error {
		got = append(got, b.Records...)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("Scan delivered %d records, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("Scan record %d =\n%v\nwant\n%v", i, got[i], want[i])
		}
	}
	if _, err := r.Get(ctx, compatShard, "never-written"); !errors.Is(err, ErrRecordNotFound) {
		t.Errorf("Get of an absent id: %v, want ErrRecordNotFound", err)
	}
}
