package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// BatchGetOptions configures BatchGet.
type BatchGetOptions struct {
	// MaxBytes caps the stored bytes of the records returned, counted in
	// request order; the first record is returned whatever its size. The
	// rest are marked OverLimit. Default 3 MiB, under gRPC's default 4 MiB
	// message limit.
	MaxBytes int
	// Project, when set, trims each record returned.
	Project func(*rolloutv1.Record)
	// Parallelism bounds the ranged GETs in flight. Default 8.
	Parallelism int
	// GapBytes: records of one generation this close to each other are read
	// with one ranged GET, the bytes between them read and dropped. Default
	// 64 KiB.
	GapBytes int64
	// ReadBytes bounds one ranged GET. Default 4 MiB.
	ReadBytes int64
}

func (o BatchGetOptions) withDefaults() BatchGetOptions {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 3 << 20
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 8
	}
	if o.GapBytes <= 0 {
		o.GapBytes = 64 << 10
	}
	if o.ReadBytes <= 0 {
		o.ReadBytes = 4 << 20
	}
	return o
}

// BatchResult is the outcome of one requested id.
type BatchResult struct {
	// Record is set when found and returned. Results of a repeated id
	// share one Record.
	Record    *rolloutv1.Record
	NotFound  bool
	OverLimit bool // found, not returned: over the response byte cap
}

// BatchGet returns one result per id, in order, from one read of the
// shard's manifest: each id is located through the cached filters and
// indexes of the live generations, and the records are read with ranged
// GETs that merge nearby records of a generation, several in flight. Like
// Get it sees every append acknowledged before it began. A missing id is a
// result, not an error.
//
// Errors: ErrShardNotFound, ErrShardDeleted, ErrCorrupt naming the blob, a
// storage error, or ctx's error.
func (r *Reader) BatchGet(ctx context.Context, shard string, ids []string, opts BatchGetOptions) ([]BatchResult, error) {
	opts = opts.withDefaults()
	var lastErr error
	for range maxReadRetries {
		m, err := r.Manifest(ctx, shard)
		if err != nil {
			return nil, err
		}
		if m.GetTombstone() != nil {
			return nil, deletedError(shard)
		}
		res, err := r.batchGet(ctx, shard, m, ids, opts)
		if !errors.Is(err, blob.ErrNotFound) {
			return res, err
		}
		// A generation was merged away and collected since the manifest
		// was read: the next manifest lists its records elsewhere.
		lastErr = err
	}
	return nil, fmt.Errorf("shard %q: generations kept vanishing during a batch get: %w", shard, lastErr)
}

// located is a found id: its generation and footer entry.
type located struct {
	g *storagepb.Generation
	e *storagepb.FooterEntry
}

func (r *Reader) batchGet(ctx context.Context, shard string, m *storagepb.Manifest, ids []string, opts BatchGetOptions) ([]BatchResult, error) {
	want := make(map[string]*located, len(ids))
	for _, id := range ids {
		want[id] = nil
	}
	if err := r.locateAll(ctx, shard, m, want); err != nil {
		return nil, err
	}
	// Decide what is returned before reading anything: the byte cap is
	// taken in request order, by stored size, each id counted once.
	results := make([]BatchResult, len(ids))
	take := map[string]bool{}
	budget := opts.MaxBytes
	for i, id := range ids {
		loc := want[id]
		switch {
		case loc == nil:
			results[i].NotFound = true
		case take[id]:
		case len(take) == 0 || int(loc.e.GetLength()) <= budget:
			take[id] = true
			budget -= int(loc.e.GetLength())
		default:
			results[i].OverLimit = true
			budget = -1 // what is returned is a prefix of the request
		}
	}
	recs, err := r.readLocated(ctx, shard, want, take, opts)
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if rec, ok := recs[id]; ok {
			results[i].Record = rec
		}
	}
	return results, nil
}

// locateAll fills want with the location of each id the manifest's live
// generations hold, newest generation first (an id lives in one). Filters
// and indexes come from the cache, or are read in parallel.
func (r *Reader) locateAll(ctx context.Context, shard string, m *storagepb.Manifest, want map[string]*located) error {
	gens := m.GetGenerations()
	idx := make([]*index, len(gens))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, gen := range gens {
		g.Go(func() error {
			f, err := loadFilter(gctx, r.store, r.cache, shard, gen)
			if err != nil {
				return err
			}
			hit := false
			for id := range want {
				if f.TestString(id) {
					hit = true
					break
				}
			}
			if !hit {
				return nil
			}
			idx[i], err = loadIndex(gctx, r.store, r.cache, shard, gen)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i := len(gens) - 1; i >= 0; i-- {
		if idx[i] == nil {
			continue
		}
		for id, loc := range want {
			if loc != nil {
				continue
			}
			if e, ok := idx[i].byID[id]; ok {
				want[id] = &located{gens[i], e}
			}
		}
	}
	return nil
}

// readLocated reads the records of the ids in take, merging the reads of
// records of one generation that lie within GapBytes of each other.
func (r *Reader) readLocated(ctx context.Context, shard string, want map[string]*located, take map[string]bool, opts BatchGetOptions) (map[string]*rolloutv1.Record, error) {
	byGen := map[genKey][]*located{}
	for id := range take {
		loc := want[id]
		k := keyOf(loc.g)
		byGen[k] = append(byGen[k], loc)
	}
	var chunks []chunk
	gens := map[*storagepb.FooterEntry]*storagepb.Generation{}
	for _, locs := range byGen {
		slices.SortFunc(locs, func(a, b *located) int { return cmp.Compare(a.e.GetOffset(), b.e.GetOffset()) })
		for i := 0; i < len(locs); {
			first := locs[i].e.GetOffset()
			end := first + uint64(locs[i].e.GetLength())
			entries := []*storagepb.FooterEntry{locs[i].e}
			gens[locs[i].e] = locs[i].g
			j := i + 1
			for ; j < len(locs); j++ {
				e := locs[j].e
				eEnd := e.GetOffset() + uint64(e.GetLength())
				if int64(e.GetOffset())-int64(end) > opts.GapBytes || int64(eEnd-first) > opts.ReadBytes {
					break
				}
				entries = append(entries, e)
				gens[e] = locs[j].g
				end = max(end, eEnd)
			}
			chunks = append(chunks, chunk{entries: entries, first: first, end: end})
			i = j
		}
	}
	var mu sync.Mutex
	out := make(map[string]*rolloutv1.Record, len(take))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Parallelism)
	for _, c := range chunks {
		gen := gens[c.entries[0]]
		g.Go(func() error {
			name := keyOf(gen).name(shard)
			data, _, err := r.store.Get(gctx, name, blob.GetOptions{Offset: int64(c.first), Length: int64(c.end - c.first)})
			if err != nil {
				return fmt.Errorf("shard %q: batch get from %s: %w", shard, name, err)
			}
			if uint64(len(data)) != c.end-c.first {
				return fmt.Errorf("%w: blob %s: ranged read returned %d bytes, want %d", ErrCorrupt, name, len(data), c.end-c.first)
			}
			for _, e := range c.entries {
				b, err := format.Record(data[e.GetOffset()-c.first:e.GetOffset()-c.first+uint64(e.GetLength())], e)
				if err != nil {
					return fmt.Errorf("%w: blob %s: %w", ErrCorrupt, name, err)
				}
				rec := &rolloutv1.Record{}
				if err := proto.Unmarshal(b, rec); err != nil {
					return fmt.Errorf("%w: blob %s: record %q: %w", ErrCorrupt, name, e.GetId(), err)
				}
				if opts.Project != nil {
					opts.Project(rec)
				}
				mu.Lock()
				out[e.GetId()] = rec
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}
