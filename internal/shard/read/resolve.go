package read

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

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
// records with the next one's (see check, in cursor.go).
type cursor struct {
	seq         uint64 // the last seq passed: delivered, or skipped by the caller
	seen        bool   // an incarnation was seen live
	incarnation uint64
}

// query says which records of a shard a resolve reads.
type query struct {
	// all selects every record after the cursor, in seq order.
	all bool
	// ids, unless all, selects records by id, each read once however
	// often it is repeated.
	ids []string
	// take, for a read by ids, chooses from the ids located in a view
	// (with their footer entries) the ones read; nil reads them all. It is
	// called once for each view read.
	take func(located map[string]*storagepb.FooterEntry) map[string]bool
	// speculate sends the ranged GET of the only id beside the manifest
	// read when the cached view already locates it (Get).
	speculate bool
	// follow: a shard not written yet, or deleted before the cursor saw it
	// live, is waited for (resolve returns having read nothing), not an
	// error.
	follow bool
	// gap: located records of one generation this close to each other are
	// read with one ranged GET, the bytes between them dropped. A read by
	// range reads adjacent records together whatever gap says.
	gap int64
	// readBytes bounds one ranged GET (a single larger record is read
	// whole).
	readBytes int64
	// parallel bounds the ranged GETs in flight. Above 0 they are sent
	// ahead of the one being delivered; 0 reads one at a time, in the
	// caller's goroutine.
	parallel int
}

// span is one ranged GET of records of one generation.
type span struct {
	g          *storagepb.Generation
	entries    []*storagepb.FooterEntry // by offset
	first, end uint64
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
	for id, e := range take {
		byGen[at[id].gen] = append(byGen[at[id].gen], e)
	}
	var spans []span
	for i, g := range gens {
		if es := byGen[i]; es != nil {
			slices.SortFunc(es, func(a, b *storagepb.FooterEntry) int { return cmp.Compare(a.GetOffset(), b.GetOffset()) })
			spans = appendSpans(spans, g, es, q.gap, q.readBytes)
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
	f, err := shardlog.LoadFilter(ctx, r.store, r.cache, shard, g)
	if err != nil {
		return nil, err
	}
	for id, a := range at {
		if a.gen < 0 && f.TestString(id) {
			return shardlog.LoadIndex(ctx, r.store, r.cache, shard, g)
		}
	}
	return nil, nil
}

// rangeSpans plans the reads of the records after a seq in a view's
// generations, in seq order, and loads a generation's index only when its
// first read is wanted: a scan that stops early reads no more footers.
type rangeSpans struct {
	r         *Reader
	shard     string
	gens      []*storagepb.Generation
	after     uint64
	readBytes int64
	pending   []span
}

func (it *rangeSpans) next(ctx context.Context) (span, bool, error) {
	for len(it.pending) == 0 {
		if len(it.gens) == 0 {
			return span{}, false, nil
		}
		g := it.gens[0]
		it.gens = it.gens[1:]
		if g.GetLastSeq() <= it.after {
			continue
		}
		idx, err := shardlog.LoadIndex(ctx, it.r.store, it.r.cache, it.shard, g)
		if err != nil {
			return span{}, false, err
		}
		entries := idx.Footer.GetEntries()
		i := sort.Search(len(entries), func(i int) bool { return entries[i].GetSeq() > it.after })
		if i == len(entries) {
			continue
		}
		it.pending = appendSpans(it.pending, g, entries[i:], it.readBytes, it.readBytes)
		// The next generation is read after these records, as a cursor
		// that had delivered them would resume.
		it.after = entries[len(entries)-1].GetSeq()
	}
	s := it.pending[0]
	it.pending = it.pending[1:]
	return s, true, nil
}

// appendSpans splits entries of g, by offset, into runs that are at most
// gap apart and readBytes long, one ranged GET each.
func appendSpans(spans []span, g *storagepb.Generation, entries []*storagepb.FooterEntry, gap, readBytes int64) []span {
	for i := 0; i < len(entries); {
		first := entries[i].GetOffset()
		end := first + uint64(entries[i].GetLength())
		j := i + 1
		for ; j < len(entries); j++ {
			e := entries[j]
			eEnd := e.GetOffset() + uint64(e.GetLength())
			if int64(e.GetOffset())-int64(end) > gap || int64(eEnd-first) > readBytes {
				break
			}
			end = max(end, eEnd)
		}
		spans = append(spans, span{g: g, entries: entries[i:j:j], first: first, end: end})
		i = j
	}
	return spans
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
	name := format.KeyOf(s.g).Blob(shard)
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
		name := format.KeyOf(s.g).Blob(shard)
		if !classify {
			return fmt.Errorf("%w: blob %s: %w", shardlog.ErrCorrupt, name, err)
		}
		return shardlog.CorruptOrReplaced(ctx, r.store, shard, s.g, name, err)
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
