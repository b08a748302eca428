package read

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// The read path. Get, BatchGet and Scan (following or not) resolve records
// with one function, resolve: it reads the shard's view (Manifest: the
// manifest, conditionally, the log probe after its checkpoint and the
// confirming manifest read), finds the records in the live generations
// through the shared cache of filters and indexes (whose put ids are
// checked against the view), reads them with ranged GETs, checks each, and
// reads the view again when a blob it listed was replaced or collected
// meanwhile. Only readSpan, which resolve alone calls, reads record bytes
// (the shard package's readpath_test.go holds the engine to that).
//
// A resolve keeps nothing of its own between calls but the caller's
// cursor: what it caches is the Reader's, per process and keyed by shard.
// So one Reader serves any number of shards, and a caller that follows
// many shards keeps one cursor per shard.

// cursor is where reads of one shard resume, and what they have seen of
// it. A read by range resumes after seq. Every read pins the incarnation
// it first sees live, so that it never mixes a deleted incarnation's
// records with the next one's (see check).
type cursor struct {
	seq         uint64 // the last seq passed: delivered, or skipped by the caller
	seen        bool   // an incarnation was seen live
	incarnation uint64
}

// check checks m, a view a read just took, against the incarnation the
// cursor reads. A cursor reads one incarnation: the first it sees live. A
// deleted shard's records are gone, so a read that meets a tombstone or a
// later incarnation ends with ErrShardDeleted; a follower (follow) that
// has seen nothing live yet waits for the shard to be written, as it waits
// for a shard never written (wait).
func (c *cursor) check(shard string, m *storagepb.Manifest, follow bool) (wait bool, err error) {
	switch {
	case c.seen && (m.GetIncarnation() != c.incarnation || m.GetTombstone() != nil):
		return false, deletedError(shard)
	case c.seen:
		return false, nil
	case m.GetTombstone() != nil && follow:
		return true, nil
	case m.GetTombstone() != nil:
		return false, deletedError(shard)
	}
	c.seen, c.incarnation = true, m.GetIncarnation()
	return false, nil
}

// deletedError is the error of a read that met a tombstone.
func deletedError(shard string) error {
	return fmt.Errorf("shard %q: %w", shard, shardlog.ErrShardDeleted)
}

// Get returns the record with id in shard. It always reads the current
// manifest (a conditional GET when cached), so it sees every append
// acknowledged before it started, by any instance.
//
// Errors: ErrShardNotFound, ErrRecordNotFound, ErrCorrupt naming the blob,
// or a storage error (blob.ErrUnavailable, …).
func (r *Reader) Get(ctx context.Context, shard, id string) (*rolloutv1.Record, error) {
	var rec *rolloutv1.Record
	err := r.resolve(ctx, shard, &cursor{}, query{ids: []string{id}, speculate: true}, func(s span, recs [][]byte) error {
		var err error
		rec, err = decodeRecord(s.blob, s.entries[0], recs[0])
		return err
	})
	switch {
	case err != nil:
		return nil, err
	case rec == nil:
		return nil, fmt.Errorf("shard %q: id %q: %w", shard, id, shardlog.ErrRecordNotFound)
	}
	return rec, nil
}

// decodeRecord decodes b, the checked encoding of footer entry e of the
// blob named name.
func decodeRecord(name string, e *storagepb.FooterEntry, b []byte) (*rolloutv1.Record, error) {
	rec := &rolloutv1.Record{}
	if err := proto.Unmarshal(b, rec); err != nil {
		return nil, fmt.Errorf("%w: blob %s: record %q: %w", shardlog.ErrCorrupt, name, e.GetId(), err)
	}
	return rec, nil
}

// resolve reads the records q selects from shard as of a view of the shard
// that sees every append acknowledged before it began, and hands them to
// got one span at a time: recs[i] is the checked encoding of s.entries[i]
// (a rollout.v1.Record), in seq order for a read by range. A read by range
// moves c.seq past each span got took. got's error ends the resolve and is
// returned.
//
// A blob the view lists that is gone, or holds another log entry, was
// merged away and collected (and perhaps created again by a late fence):
// resolve reads the view again and resumes, up to shardlog.MaxReadRetries times in
// a row without progress.
//
// Errors: ErrShardNotFound, ErrShardDeleted, ErrCorrupt naming the blob, a
// storage error, ctx's error, or got's.
func (r *Reader) resolve(ctx context.Context, shard string, c *cursor, q query, got func(s span, recs [][]byte) error) error {
	var m *storagepb.Manifest
	if q.speculate {
		done, spec, err := r.speculate(ctx, shard, c, q, got)
		if done || err != nil {
			return err
		}
		m = spec
	}
	stuckAt := c.seq
	for attempt := 0; ; attempt++ {
		if m == nil {
			var err error
			m, err = r.Manifest(ctx, shard)
			if errors.Is(err, shardlog.ErrShardNotFound) && q.follow {
				return nil // not written yet: a follower waits for it
			}
			if err != nil {
				return err
			}
		}
		if wait, err := c.check(shard, m, q.follow); wait || err != nil {
			return err
		}
		err := r.readView(ctx, shard, m, c, q, got)
		if !errors.Is(err, blob.ErrNotFound) {
			return err
		}
		// The next view lists the records elsewhere, and the cursor says
		// where a read by range was. A long scan may meet this many times;
		// it gives up only when it keeps happening without progress.
		if c.seq != stuckAt {
			stuckAt, attempt = c.seq, 0
		}
		if attempt >= shardlog.MaxReadRetries {
			return fmt.Errorf("shard %q: generations kept vanishing while reading them: %w", shard, err)
		}
		m = nil
	}
}

// readView reads what q selects from the view m.
func (r *Reader) readView(ctx context.Context, shard string, m *storagepb.Manifest, c *cursor, q query, got func(span, [][]byte) error) error {
	if q.all {
		it := &rangeSpans{r: r, shard: shard, gens: m.GetGenerations(), after: c.seq, readBytes: q.readBytes}
		return r.readSpans(ctx, shard, q, it.next, func(s span, recs [][]byte) error {
			if err := got(s, recs); err != nil {
				return err
			}
			c.seq = s.entries[len(s.entries)-1].GetSeq()
			return nil
		})
	}
	spans, err := r.spansOfIDs(ctx, shard, m, q)
	if err != nil {
		return err
	}
	return r.readSpans(ctx, shard, q, func(context.Context) (span, bool, error) {
		if len(spans) == 0 {
			return span{}, false, nil
		}
		s := spans[0]
		spans = spans[1:]
		return s, true, nil
	}, got)
}

// spanRead is a span's bytes as read.
type spanRead struct {
	data []byte
	err  error
}

// readSpans reads the spans next plans, q.parallel at a time, and hands
// each one's checked records to got in order. A span read ahead is
// cancelled and waited for when got or a read fails. An error of next
// ends the planning; the spans planned before it are still delivered.
func (r *Reader) readSpans(ctx context.Context, shard string, q query, next func(context.Context) (span, bool, error), got func(span, [][]byte) error) error {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	type pending struct {
		s    span
		done chan spanRead
	}
	var queue []pending
	var planErr error
	more := true
	fill := func() {
		for more && len(queue) < q.parallel {
			s, ok, err := next(ctx)
			if err != nil || !ok {
				more, planErr = false, err
				return
			}
			p := pending{s, make(chan spanRead, 1)}
			wg.Go(func() {
				data, err := r.readSpan(rctx, shard, s)
				p.done <- spanRead{data, err}
			})
			queue = append(queue, p)
		}
	}
	for {
		var s span
		var res spanRead
		fill()
		if len(queue) > 0 {
			s, res = queue[0].s, <-queue[0].done
			queue = queue[1:]
			fill() // keep parallel reads in flight while this one is delivered
		} else {
			if q.parallel > 0 || !more {
				return planErr
			}
			var ok bool
			var err error
			if s, ok, err = next(ctx); err != nil || !ok {
				return err
			}
			res.data, res.err = r.readSpan(ctx, shard, s)
		}
		recs, err := r.checkSpan(ctx, shard, s, res, true)
		if err != nil {
			return err
		}
		if err := got(s, recs); err != nil {
			return err
		}
	}
}

// readSpan reads the bytes of s with one ranged GET. It is the only reader
// of record bytes in the package.
func (r *Reader) readSpan(ctx context.Context, shard string, s span) ([]byte, error) {
	name := s.blob
	data, _, err := r.store.Get(ctx, name, blob.GetOptions{Offset: int64(s.first), Length: int64(s.end - s.first)})
	if err != nil {
		return nil, fmt.Errorf("shard %q: read records from %s: %w", shard, name, err)
	}
	return data, nil
}

// checkSpan verifies the records of s in res against their footer
// entries. A record that fails is ErrCorrupt, or, with classify, when its
// log position holds another entry now, the batch being gone
// (corruptOrReplaced): a late fence created the position again after GC,
// and the index the cache holds is the listed batch's, so only the
// record's bytes can tell.
func (r *Reader) checkSpan(ctx context.Context, shard string, s span, res spanRead, classify bool) ([][]byte, error) {
	if res.err != nil {
		return nil, res.err
	}
	corrupt := func(err error) error {
		name := s.blob
		if !classify {
			return fmt.Errorf("%w: blob %s: %w", shardlog.ErrCorrupt, name, err)
		}
		src := r.source(shard)
		return src.CorruptOrReplaced(ctx, s.g, name, err)
	}
	if uint64(len(res.data)) != s.end-s.first {
		return nil, corrupt(fmt.Errorf("ranged read returned %d bytes, want %d", len(res.data), s.end-s.first))
	}
	recs := make([][]byte, len(s.entries))
	for i, e := range s.entries {
		b, err := format.Record(res.data[e.GetOffset()-s.first:e.GetOffset()-s.first+uint64(e.GetLength())], e)
		if err != nil {
			return nil, corrupt(err)
		}
		recs[i] = b
	}
	return recs, nil
}

// speculate overlaps the two reads of a Get when the cached manifest and
// index already say where its id is: the ranged GET of the record goes out
// beside the conditional GET of the manifest, so a Get costs about one
// round trip instead of two. The record stands only if the current
// manifest still lists its generation (usually it is unchanged: a 304).
// That is enough because a committed id lives in exactly one live
// generation (appends are idempotent by id) and generations are immutable.
//
// It reports whether it delivered the record to got, or else returns the
// current manifest it read (nil when it did not speculate) for resolve to
// go on with, or the manifest's error.
func (r *Reader) speculate(ctx context.Context, shard string, c *cursor, q query, got func(span, [][]byte) error) (bool, *storagepb.Manifest, error) {
	r.mu.Lock()
	cached, ok := r.manifests.Peek(shard)
	r.mu.Unlock()
	if !ok || q.all || len(q.ids) != 1 || q.take != nil {
		return false, nil, nil
	}
	g, idx, e, ok := r.locate(shard, cached.view, q.ids[0])
	if !ok {
		return false, nil, nil
	}
	s := span{g: g, blob: idx.Blob, entries: []*storagepb.FooterEntry{e}, first: e.GetOffset(), end: e.GetOffset() + uint64(e.GetLength())}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan spanRead, 1)
	go func() {
		data, err := r.readSpan(rctx, shard, s)
		done <- spanRead{data, err}
	}()
	m, err := r.Manifest(ctx, shard)
	stands := err == nil && (m == cached.view || lists(m, g))
	if !stands {
		cancel() // its answer would be thrown away
	}
	res := <-done // the read never outlives the resolve
	if err != nil {
		return false, nil, err
	}
	if !stands {
		return false, m, nil
	}
	// A record that fails its check is read again on m, which decides
	// whether its blob was replaced.
	recs, err := r.checkSpan(ctx, shard, s, res, false)
	if err != nil {
		return false, m, nil
	}
	if wait, err := c.check(shard, m, q.follow); wait || err != nil {
		return true, nil, err
	}
	return true, nil, got(s, recs)
}

// locate finds id in m from cached filters and indexes only: its
// generation, that generation's index and the id's entry there.
func (r *Reader) locate(shard string, m *storagepb.Manifest, id string) (*storagepb.Generation, *shardlog.Index, *storagepb.FooterEntry, bool) {
	gens := m.GetGenerations()
	for i := len(gens) - 1; i >= 0; i-- {
		g := gens[i]
		ref := shardlog.RefOf(shard, g)
		f, ok := r.cache.GetFilter(ref)
		if !ok {
			return nil, nil, nil, false
		}
		if !f.TestString(id) {
			continue
		}
		idx, ok := r.cache.GetIndex(ref)
		if !ok {
			return nil, nil, nil, false
		}
		if e, ok := idx.ByID[id]; ok {
			return g, idx, e, true
		}
	}
	return nil, nil, nil, false
}

// lists reports whether m lists generation g as live.
func lists(m *storagepb.Manifest, g *storagepb.Generation) bool {
	for _, h := range m.GetGenerations() {
		if format.KeyOf(h) == format.KeyOf(g) {
			return true
		}
	}
	return false
}

// Locating ids: through the view's generations' filters and indexes,
// cached (locate, for a speculative Get) or read (spansOfIDs).

// spansOfIDs locates q's ids in m and plans the reads of those q takes.
func (r *Reader) spansOfIDs(ctx context.Context, shard string, m *storagepb.Manifest, q query) ([]span, error) {
	gens := m.GetGenerations()
	at, err := r.locateIDs(ctx, shard, gens, q.ids, max(q.parallel, 1))
	if err != nil {
		return nil, err
	}
	located := make(map[string]*storagepb.FooterEntry, len(at))
	for id, a := range at {
		located[id] = a.ByID[id]
	}
	take := located
	if q.take != nil {
		chosen := q.take(located)
		take = make(map[string]*storagepb.FooterEntry, len(chosen))
		for id := range chosen {
			take[id] = located[id]
		}
	}
	byGen := map[int][]*storagepb.FooterEntry{}
	blobs := map[int]string{}
	for id, e := range take {
		byGen[at[id].gen] = append(byGen[at[id].gen], e)
		blobs[at[id].gen] = at[id].Blob
	}
	var spans []span
	for i, g := range gens {
		if es := byGen[i]; es != nil {
			slices.SortFunc(es, func(a, b *storagepb.FooterEntry) int { return cmp.Compare(a.GetOffset(), b.GetOffset()) })
			spans = appendSpans(spans, g, blobs[i], es, q.gap, q.readBytes)
		}
	}
	return spans, nil
}

// idAt is where a located id lives: the index of its generation in the
// view, and that generation's index.
type idAt struct {
	gen int
	*shardlog.Index
}

// locateIDs finds each of ids in gens through their filters and indexes
// (cached, or read parallel generations at a time), newest generation
// first, and stops once every id is found: a committed id lives in one
// live generation.
func (r *Reader) locateIDs(ctx context.Context, shard string, gens []*storagepb.Generation, ids []string, parallel int) (map[string]idAt, error) {
	at := make(map[string]idAt, len(ids))
	wanted := 0
	for _, id := range ids {
		if _, dup := at[id]; !dup {
			at[id] = idAt{gen: -1}
			wanted++
		}
	}
	for hi := len(gens); hi > 0 && wanted > 0; hi -= parallel {
		lo := max(0, hi-parallel)
		idx := make([]*shardlog.Index, hi-lo)
		errs := make([]error, hi-lo)
		load := func(i int) {
			idx[i-lo], errs[i-lo] = r.loadIfHit(ctx, shard, gens[i], at)
		}
		if hi-lo == 1 {
			load(lo)
		} else {
			var wg sync.WaitGroup
			for i := lo; i < hi; i++ {
				wg.Go(func() { load(i) })
			}
			wg.Wait()
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		for i := hi - 1; i >= lo; i-- {
			if idx[i-lo] == nil {
				continue
			}
			for id, a := range at {
				if a.gen >= 0 {
					continue // found in a newer generation
				}
				if _, ok := idx[i-lo].ByID[id]; ok {
					at[id] = idAt{i, idx[i-lo]}
					wanted--
				}
			}
		}
	}
	for id, a := range at {
		if a.gen < 0 {
			delete(at, id)
		}
	}
	return at, nil
}

// loadIfHit returns g's index when its filter admits an id not found yet,
// else nil.
func (r *Reader) loadIfHit(ctx context.Context, shard string, g *storagepb.Generation, at map[string]idAt) (*shardlog.Index, error) {
	src := r.source(shard)
	f, err := src.Filter(ctx, g)
	if err != nil {
		return nil, err
	}
	for id, a := range at {
		if a.gen < 0 && f.TestString(id) {
			return src.Index(ctx, g)
		}
	}
	return nil, nil
}
