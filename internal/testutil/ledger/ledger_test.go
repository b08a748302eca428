package ledger_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// written appends ids to shard s of a fresh store, one append each, and
// returns the store, the ledger of the acks and the entries' client hashes.
func written(t *testing.T, s string, ids ...string) (blob.Store, *ledger.Ledger, map[string]uint64) {
	t.Helper()
	store := memstore.New()
	w, err := shard.Open(t.Context(), store, s, shard.Options{RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	l := ledger.New()
	hashes := map[string]uint64{}
	for _, id := range ids {
		e, err := shard.Prepare(ledger.Record(id), time.Unix(1_700_000_000, 0))
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.Append(t.Context(), []shard.Entry{e})
		if err != nil {
			t.Fatal(err)
		}
		hashes[id] = e.ClientHash
		if err := l.Acked(s, id, ledger.Ack{Seq: res[0].Seq, Hash: e.ClientHash}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return store, l, hashes
}

func manifests(store blob.Store) ledger.ManifestFunc {
	return ledger.Manifests(shard.NewReader(store, shard.ReaderOptions{}).Manifest, shard.ErrShardNotFound, shard.ErrShardDeleted)
}

func check(t *testing.T, l *ledger.Ledger, store blob.Store) string {
	t.Helper()
	_, errs := l.Check(context.Background(), store, manifests(store), "never")
	return errors.Join(errs...).Error()
}

// The ledger passes what the writer stored, and fails each way a store can
// break "every acknowledged record exactly once".
func TestCheck(t *testing.T) {
	store, l, hashes := written(t, "s", "a", "b", "c")
	shards, errs := l.Check(t.Context(), store, manifests(store), "never")
	if len(errs) != 0 {
		t.Fatalf("a clean store: %v", errs)
	}
	if sh := shards["s"]; len(sh.Records) != 3 || sh.Generations == 0 || shards["never"].Manifest != nil {
		t.Fatalf("read %+v", shards)
	}

	for _, tc := range []struct {
		name  string
		spoil func(l *ledger.Ledger, store blob.Store)
		want  string
	}{
		{"an acknowledged record is lost", func(l *ledger.Ledger, _ blob.Store) {
			_ = l.Acked("s", "lost", ledger.Ack{Seq: 9})
		}, "acknowledged s/lost (seq 9) is not stored"},
		{"an acknowledged record is gone from storage", func(_ *ledger.Ledger, store blob.Store) {
			page, _ := store.List(context.Background(), blob.ListOptions{})
			for _, it := range page.Items {
				if !strings.HasSuffix(it.Name, "_manifest") {
					_ = store.Delete(context.Background(), it.Name, blob.DeleteOptions{})
				}
			}
		}, "is not stored"},
		{"a record nobody sent is stored", func(l *ledger.Ledger, _ blob.Store) {
			*l = *ledger.New()
			_ = l.Acked("s", "a", ledger.Ack{Seq: 1})
		}, `"b" is stored (seq 2`},
		{"stored at another seq", func(l *ledger.Ledger, _ blob.Store) {
			*l = *ledger.New()
			for id, seq := range map[string]uint64{"a": 1, "b": 3, "c": 2} {
				_ = l.Acked("s", id, ledger.Ack{Seq: seq})
			}
		}, "acknowledged s/b at seq 3 is stored at seq 2"},
		{"stored with other content", func(l *ledger.Ledger, _ blob.Store) {
			*l = *ledger.New()
			for id, seq := range map[string]uint64{"a": 1, "b": 2, "c": 3} {
				_ = l.Acked("s", id, ledger.Ack{Seq: seq, Hash: hashes[id] + 1})
			}
		}, "acknowledged s/a (seq 1) is stored with other content"},
		{"live after a delete", func(l *ledger.Ledger, _ blob.Store) { l.DeletedThrough("s", 2) }, "is live, though a delete answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, l, _ := written(t, "s", "a", "b", "c")
			tc.spoil(l, store)
			if _, errs := l.Check(t.Context(), store, manifests(store)); len(errs) == 0 {
				t.Fatal("the ledger passed a broken store")
			} else if got := check(t, l, store); !strings.Contains(got, tc.want) {
				t.Fatalf("got %s\nwant it to mention %q", got, tc.want)
			}
		})
	}
}

// Acked tells a retry that found its record from a second, different ack.
func TestAckedAgain(t *testing.T) {
	l := ledger.New()
	if err := l.Acked("s", "a", ledger.Ack{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Acked("s", "a", ledger.Ack{Seq: 1}); !errors.Is(err, ledger.ErrAckedAgain) {
		t.Errorf("same seq: %v", err)
	}
	if err := l.Acked("s", "a", ledger.Ack{Seq: 2}); err == nil || errors.Is(err, ledger.ErrAckedAgain) {
		t.Errorf("another seq: %v", err)
	}
	if a, _ := l.Get("s", "a"); a.Seq != 1 || l.Len() != 1 {
		t.Errorf("the first ack did not stay: %v, %d", a, l.Len())
	}
	l.MayLand("s", "b", 0)
	if got := l.Shards(); len(got) != 1 || got[0] != "s" {
		t.Errorf("shards %v", got)
	}
}
