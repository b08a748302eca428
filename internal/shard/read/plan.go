package read

import (
	"context"
	"sort"

	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

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
	blob       string                   // g's blob, from the index the span was planned with
	entries    []*storagepb.FooterEntry // by offset
	first, end uint64
}

// Planning a read: which ranged GETs fetch the records a query selects.
// A read by ids first locates them (resolve.go, beside locate); a read by
// range walks the view's generations in seq order (rangeSpans).

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
		src := it.r.source(it.shard)
		idx, err := src.Index(ctx, g)
		if err != nil {
			return span{}, false, err
		}
		entries := idx.Footer.GetEntries()
		i := sort.Search(len(entries), func(i int) bool { return entries[i].GetSeq() > it.after })
		if i == len(entries) {
			continue
		}
		it.pending = appendSpans(it.pending, g, idx.Blob, entries[i:], it.readBytes, it.readBytes)
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
func appendSpans(spans []span, g *storagepb.Generation, name string, entries []*storagepb.FooterEntry, gap, readBytes int64) []span {
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
		spans = append(spans, span{g: g, blob: name, entries: entries[i:j:j], first: first, end: end})
		i = j
	}
	return spans
}
