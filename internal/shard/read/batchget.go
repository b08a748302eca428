package read

import (
	"context"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/defaults"
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
	defaults.Positive(&o.MaxBytes, 3<<20)
	defaults.Positive(&o.Parallelism, 8)
	defaults.Positive(&o.GapBytes, 64<<10)
	defaults.Positive(&o.ReadBytes, 4<<20)
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
	var results []BatchResult
	var out map[string]*rolloutv1.Record
	q := query{
		ids:       ids,
		gap:       opts.GapBytes,
		readBytes: opts.ReadBytes,
		parallel:  opts.Parallelism,
		take: func(located map[string]*storagepb.FooterEntry) map[string]bool {
			results = make([]BatchResult, len(ids))
			out = make(map[string]*rolloutv1.Record, len(located))
			return capBytes(ids, located, opts.MaxBytes, results)
		},
	}
	err := r.resolve(ctx, shard, &cursor{}, q, func(s span, recs [][]byte) error {
		for i, e := range s.entries {
			rec, err := decodeRecord(s.blob, e, recs[i])
			if err != nil {
				return err
			}
			if opts.Project != nil {
				opts.Project(rec)
			}
			out[e.GetId()] = rec
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if rec, ok := out[id]; ok {
			results[i].Record = rec
		}
	}
	return results, nil
}

// capBytes decides what is returned before anything is read: the byte cap
// is taken in request order, by stored size, each id counted once. It
// marks the ids not located, and those over the cap, in results, and
// returns the ids to read.
func capBytes(ids []string, located map[string]*storagepb.FooterEntry, maxBytes int, results []BatchResult) map[string]bool {
	take := map[string]bool{}
	budget := maxBytes
	for i, id := range ids {
		e := located[id]
		switch {
		case e == nil:
			results[i].NotFound = true
		case take[id]:
		case len(take) == 0 || int(e.GetLength()) <= budget:
			take[id] = true
			budget -= int(e.GetLength())
		default:
			results[i].OverLimit = true
			budget = -1 // what is returned is a prefix of the request
		}
	}
	return take
}
