package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// ManifestFunc reads a shard's manifest as a reader sees it (with the log's
// tail after the checkpoint folded in). It returns nil and no error when
// the shard does not exist or was deleted.
type ManifestFunc func(ctx context.Context, shard string) (*storagepb.Manifest, error)

// Stored is one record that a shard's live generations hold.
type Stored struct {
	Shard, ID string
	Seq, Hash uint64 // Hash is the entry's client hash
	Blob      string // the generation holding it
	// Record is the record's encoded bytes (a rollout.v1.Record, without
	// its seq), as format.Record returns them.
	Record []byte
}

// Key returns the record's key.
func (s Stored) Key() Key { return Key{s.Shard, s.ID} }

// Shard is what one shard holds.
type Shard struct {
	Name        string
	Manifest    *storagepb.Manifest // nil when the shard does not exist
	Records     []Stored            // in seq order
	Generations int                 // live generations read
}

// Read reads shard name straight from store: its manifest through
// manifest, then every live generation. It returns the records they hold and
// every violation of the shard's own invariants: a live generation that is
// missing or does not decode, or whose footer or entries disagree with its
// manifest entry; seqs not strictly increasing; an id stored twice; a record
// whose bytes do not check; a manifest whose record count or next seq
// disagrees with what is stored.
func Read(ctx context.Context, store blob.Store, name string, manifest ManifestFunc) (*Shard, []error) {
	sh := &Shard{Name: name}
	var errs []error
	fail := func(f string, args ...any) {
		errs = append(errs, fmt.Errorf("shard %s: "+f, append([]any{name}, args...)...))
	}
	m, err := manifest(ctx, name)
	if err != nil {
		fail("read manifest: %v", err)
		return sh, errs
	}
	if m == nil {
		return sh, nil
	}
	sh.Manifest = m
	seen := map[string]uint64{}
	var last uint64
	for _, g := range m.GetGenerations() {
		gname := format.KeyOf(g).Blob(name)
		data, _, err := store.Get(ctx, gname, blob.GetOptions{})
		if err != nil {
			fail("live generation %s: %v", gname, err)
			continue
		}
		footer, err := format.DecodeGeneration(data)
		if err != nil {
			fail("live generation %s: %v", gname, err)
			continue
		}
		sh.Generations++
		if footer.GetShard() != name || footer.GetEpoch() != g.GetEpoch() || footer.GetGeneration() != g.GetNumber() || footer.GetPosition() != g.GetPosition() {
			fail("generation %s: footer names %s epoch %d generation %d", gname, footer.GetShard(), footer.GetEpoch(), footer.GetGeneration())
		}
		entries := footer.GetEntries()
		if len(entries) != int(g.GetRecords()) || len(entries) == 0 ||
			entries[0].GetSeq() != g.GetFirstSeq() || entries[len(entries)-1].GetSeq() != g.GetLastSeq() {
			fail("generation %s: %d entries, manifest says %d records, seqs %d..%d", gname, len(entries), g.GetRecords(), g.GetFirstSeq(), g.GetLastSeq())
		}
		for _, e := range entries {
			id := e.GetId()
			if e.GetSeq() <= last {
				fail("seq %d of %q (in %s) is not above %d", e.GetSeq(), id, gname, last)
			}
			last = e.GetSeq()
			if prev, dup := seen[id]; dup {
				fail("id %q stored twice: seq %d and seq %d (in %s)", id, prev, e.GetSeq(), gname)
			}
			seen[id] = e.GetSeq()
			st := Stored{Shard: name, ID: id, Seq: e.GetSeq(), Hash: e.GetClientHash(), Blob: gname}
			end := e.GetOffset() + uint64(e.GetLength())
			if end > uint64(len(data)) {
				fail("record %q in %s: entry points past the blob", id, gname)
			} else if st.Record, err = format.Record(data[e.GetOffset():end], e); err != nil {
				fail("record %q in %s: %v", id, gname, err)
			}
			sh.Records = append(sh.Records, st)
		}
	}
	if m.GetRecordCount() != uint64(len(sh.Records)) {
		fail("manifest counts %d records, %d are stored", m.GetRecordCount(), len(sh.Records))
	}
	if m.GetNextSeq() != last+1 && len(sh.Records) > 0 {
		fail("manifest next seq %d, last stored seq %d", m.GetNextSeq(), last)
	}
	return sh, errs
}

// Manifests adapts a reader's Manifest method (shard.Reader.Manifest): an
// error that is one of gone (shard.ErrShardNotFound, say) means no shard.
func Manifests(read func(ctx context.Context, shard string) (*storagepb.Manifest, error), gone ...error) ManifestFunc {
	return func(ctx context.Context, shard string) (*storagepb.Manifest, error) {
		m, err := read(ctx, shard)
		for _, g := range gone {
			if errors.Is(err, g) {
				return nil, nil
			}
		}
		return m, err
	}
}
