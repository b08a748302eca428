package reliability

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// recorder is a blob.Store decorator that sits right above the storage, under
// the fault injector, so it sees exactly the writes that landed, in the
// order they landed. It keeps every manifest version and every generation's
// entries, to check the history of each shard afterwards, and it flags at
// once a delete of a blob that the current manifest still needs.
//
// It stays a hand-written wrapper: it holds a lock around each manifest put
// so that versions are kept in the order they landed, which a faultstore
// watcher (it runs after the put, outside any lock) cannot promise.
type recorder struct {
	blob.Store

	mu       sync.Mutex
	shards   map[string]*shardHistory
	gens     map[string][]entry // generation blob name → its entries
	problems []error
}

type entry struct {
	id  string
	seq uint64
}

type shardHistory struct {
	mu       sync.Mutex // serializes manifest writes, so versions are in landing order
	versions []*storagepb.Manifest
}

func newRecorder(inner blob.Store) *recorder {
	return &recorder{Store: inner, shards: map[string]*shardHistory{}, gens: map[string][]entry{}}
}

// parseName splits a blob name into its shard and whether it is the
// manifest or a generation.
func parseName(name string) (shardName string, manifest, generation bool) {
	rest, ok := strings.CutPrefix(name, "shards/")
	if !ok {
		return "", false, false
	}
	if s, ok := strings.CutSuffix(rest, "/_manifest"); ok {
		return s, true, false
	}
	if i := strings.LastIndex(rest, "/_g/"); i > 0 {
		return rest[:i], false, true
	}
	if i := strings.LastIndex(rest, "/_l/"); i > 0 { // a log position (protocol v2)
		return rest[:i], false, true
	}
	return "", false, false
}

func (r *recorder) history(shardName string) *shardHistory {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.shards[shardName]
	if h == nil {
		h = &shardHistory{}
		r.shards[shardName] = h
	}
	return h
}

func (r *recorder) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Errorf(format, args...))
}

func (r *recorder) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	shardName, manifest, generation := parseName(name)
	switch {
	case manifest:
		m, err := format.DecodeManifest(data)
		if err != nil {
			r.problem("manifest %s written undecodable: %v", name, err)
		}
		h := r.history(shardName)
		h.mu.Lock()
		defer h.mu.Unlock()
		attrs, err := r.Store.Put(ctx, name, data, opts)
		if err == nil && m != nil {
			h.versions = append(h.versions, m)
		}
		return attrs, err
	case generation:
		attrs, err := r.Store.Put(ctx, name, data, opts)
		if err == nil {
			f, derr := format.DecodeGeneration(data)
			if derr != nil {
				r.problem("generation %s written undecodable: %v", name, derr)
				return attrs, err
			}
			es := make([]entry, len(f.GetEntries()))
			for i, e := range f.GetEntries() {
				es[i] = entry{e.GetId(), e.GetSeq()}
			}
			r.mu.Lock()
			if _, dup := r.gens[name]; !dup {
				r.gens[name] = es
			}
			r.mu.Unlock()
		}
		return attrs, err
	}
	return r.Store.Put(ctx, name, data, opts)
}

func (r *recorder) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	shardName, manifest, generation := parseName(name)
	if manifest {
		r.problem("the manifest %s was deleted", name)
	}
	if !generation {
		return r.Store.Delete(ctx, name, opts)
	}
	// Hold the shard's manifest lock, so that the check and the delete see
	// the same manifest.
	h := r.history(shardName)
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.versions); n > 0 {
		cur := h.versions[n-1]
		for _, g := range cur.GetGenerations() {
			if format.KeyOf(g).Blob(shardName) == name {
				r.problem("GC deleted %s, which the current manifest (epoch %d) lists as live", name, cur.GetEpoch())
			}
		}
	}
	return r.Store.Delete(ctx, name, opts)
}

// historyReport sums up a recorder's check.
type historyReport struct {
	versions, claims int
}

// check verifies each shard's history of landed manifest versions:
//
//   - epochs never decrease, and each claim takes exactly the next epoch;
//   - one epoch belongs to one writer: every version written under it names
//     the same owner, and its commit id is that writer's (so no two commits
//     in one epoch came from different writers);
//   - a commit adds only generations written under its own epoch;
//   - no record ever leaves the live set or changes seq: every version
//     holds every record of the version before it.
func (r *recorder) check() (historyReport, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := append([]error(nil), r.problems...)
	var rep historyReport
	for shardName, h := range r.shards {
		h.mu.Lock()
		versions := h.versions
		h.mu.Unlock()
		owners := map[uint64]string{}
		var prev *storagepb.Manifest
		prevRecs := map[string]uint64{}
		for i, m := range versions {
			rep.versions++
			fail := func(format string, args ...any) {
				errs = append(errs, fmt.Errorf("shard %s, manifest version %d (epoch %d): "+format, append([]any{shardName, i, m.GetEpoch()}, args...)...))
			}
			epoch := m.GetEpoch()
			if o, ok := owners[epoch]; ok && o != m.GetOwner() {
				fail("owner %q, but epoch %d was claimed by %q", m.GetOwner(), epoch, o)
			}
			owners[epoch] = m.GetOwner()
			if w, _, ok := strings.Cut(m.GetCommitId(), "-"); !ok || w != m.GetOwner() {
				fail("commit id %q was not made by the epoch's owner %q", m.GetCommitId(), m.GetOwner())
			}
			if prev != nil {
				switch {
				case epoch < prev.GetEpoch():
					fail("epoch went back from %d", prev.GetEpoch())
				case epoch > prev.GetEpoch():
					rep.claims++
					if epoch != prev.GetEpoch()+1 {
						fail("claimed epoch %d after %d", epoch, prev.GetEpoch())
					}
				}
			} else {
				rep.claims++
			}
			live := map[[2]uint64]bool{}
			if prev != nil {
				for _, g := range prev.GetGenerations() {
					live[[2]uint64{g.GetEpoch(), g.GetNumber()}] = true
				}
			}
			recs := map[string]uint64{}
			for _, g := range m.GetGenerations() {
				name := format.KeyOf(g).Blob(shardName)
				// A log batch (protocol v2) joins the manifest in the
				// checkpoint that covers it, whichever epoch created it.
				if !live[[2]uint64{g.GetEpoch(), g.GetNumber()}] && g.GetEpoch() != epoch && g.GetPosition() == 0 {
					fail("added generation %s of another epoch", name)
				}
				es, ok := r.gens[name]
				if !ok {
					fail("lists generation %s, which was never written", name)
					continue
				}
				for _, e := range es {
					recs[e.id] = e.seq
				}
			}
			for id, seq := range prevRecs {
				if got, ok := recs[id]; !ok {
					fail("record %q (seq %d) left the live set", id, seq)
				} else if got != seq {
					fail("record %q changed seq from %d to %d", id, seq, got)
				}
			}
			prev, prevRecs = m, recs
		}
	}
	return rep, errs
}
