package export

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/validate"
)

// Run exports every shard under opts.Prefix after what DEST already holds.
// A shard that fails does not stop the others; Run then returns the
// summary and an error naming how many failed.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	sum := &Summary{Dest: opts.Dest.String(), Prefix: opts.Prefix}
	st, err := loadState(opts.StatePath)
	if err != nil {
		opts.Logger.Warn("ignoring the state file: the published parts say what is exported", zap.String("path", opts.StatePath), zap.Error(err))
		st = newState()
	}
	shards, err := opts.Source.Shards(ctx, opts.Prefix)
	if err != nil {
		return nil, err
	}
	if len(shards) == 0 {
		// Success for nothing would hide a mistyped selection.
		return nil, &SelectionError{Prefix: opts.Prefix}
	}
	listed := map[string]bool{}
	for _, ref := range shards {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		listed[ref.Name] = true
		sum.add(exportRef(ctx, opts, st, ref))
	}
	forgetUnlisted(ctx, opts, st, sum, listed)
	if opts.StatePath != "" {
		if err := step(opts, "state"); err != nil {
			return sum, err
		}
		if err := st.save(opts.StatePath); err != nil {
			return sum, err
		}
	}
	sum.Seconds = time.Since(start).Seconds()
	if sum.Failed > 0 {
		return sum, fmt.Errorf("export: %d of %d shards failed (see the summary)", sum.Failed, len(shards))
	}
	return sum, nil
}

// withDefaults is opts with its defaults filled in, or an error for a
// compression or a prefix that cannot be.
func (opts Options) withDefaults() (Options, error) {
	if opts.RowsPerFile <= 0 {
		opts.RowsPerFile = DefaultRowsPerFile
	}
	if _, err := opts.Compression.codec(); err != nil {
		return opts, err
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Prefix != "" {
		if err := validate.Shard(opts.Prefix); err != nil {
			return opts, fmt.Errorf("export: prefix %q: a prefix is whole segments of shard names: %w", opts.Prefix, err)
		}
	}
	return opts, nil
}

// exportRef exports ref, one shard of the source's listing, and records
// in st what is exported of it.
func exportRef(ctx context.Context, opts Options, st *state, ref ShardRef) ShardResult {
	cached, known := st.Shards[ref.Name]
	var res ShardResult
	switch {
	case ref.Err != "":
		res = ShardResult{Shard: ref.Name, Status: StatusFailed, AfterSeq: cached.LastSeq, LastSeq: cached.LastSeq, Error: ref.Err}
		opts.Logger.Error("export failed", zap.String("shard", ref.Name), zap.String("error", ref.Err))
	case ref.Deleted:
		res = ShardResult{Shard: ref.Name, Status: StatusGone, LastSeq: cached.LastSeq,
			Note: fmt.Sprintf("deleted (incarnation %d); %s", ref.Incarnation, partsKept(ctx, opts.Dest, ref.Name))}
	default:
		res = exportShard(ctx, opts, st, ref.Name)
		if known && (cached.Incarnation != ref.Incarnation || cached.Deleted) {
			note := fmt.Sprintf("deleted and written again since the last run (incarnation %d, was %d): "+
				"the new records' seqs continue above the deleted ones", ref.Incarnation, cached.Incarnation)
			if res.AfterSeq > 0 {
				note += ", and the deleted ones' parts stay in DEST"
			}
			res.Note = strings.TrimPrefix(res.Note+"; "+note, "; ")
		}
	}
	switch res.Status {
	case StatusFailed:
	case StatusGone:
		// Kept, so that a shard written again is told from one never
		// deleted.
		st.Shards[ref.Name] = stateShard{LastSeq: max(res.LastSeq, cached.LastSeq), Incarnation: ref.Incarnation, Deleted: true}
	default:
		st.Shards[ref.Name] = stateShard{LastSeq: res.LastSeq, Incarnation: ref.Incarnation}
	}
	return res
}

// add counts res, one shard's result, in s.
func (s *Summary) add(res ShardResult) {
	if res.Status == StatusFailed {
		s.Failed++
	}
	s.Shards = append(s.Shards, res)
	s.Records += res.Records
	s.Parts += len(res.Parts)
	s.RecordBytes += res.RecordBytes
}

// forgetUnlisted reports the shards st knew that the source no longer
// lists at all as gone too, and forgets them; their parts, if any, stay
// in DEST. A source that only knows the shards it was told of cannot say
// that.
func forgetUnlisted(ctx context.Context, opts Options, st *state, sum *Summary, listed map[string]bool) {
	n, ok := opts.Source.(interface{ NamedShards() bool })
	named := ok && n.NamedShards()
	for _, sh := range slices.Sorted(maps.Keys(st.Shards)) {
		if !named && validate.Covers(opts.Prefix, sh) && !listed[sh] {
			sum.Shards = append(sum.Shards, ShardResult{Shard: sh, Status: StatusGone, LastSeq: st.Shards[sh].LastSeq,
				Note: "no longer in the source; " + partsKept(ctx, opts.Dest, sh)})
			delete(st.Shards, sh)
		}
	}
}
