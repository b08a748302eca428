package export

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// GCPercent is the GOGC that the export command runs with (unless GOGC is
// set). Export's live heap is small and steady (about 25 MB: a row group
// being written and the batches in flight), so the default 100 lets the
// heap, and peak RSS, reach twice that only after a long run; at 50 a
// 10k-record export and a 100k-record one peak alike (exportbench), for
// no time that the measurement could tell.
const GCPercent = 50

// DefaultRowsPerFile is the default --rows-per-file.
const DefaultRowsPerFile = 1_000_000

// Options configure Run.
type Options struct {
	Source Source
	Dest   Dest
	// Prefix selects the shards it covers on whole '/'-separated segments
	// (validate.Covers, as ListShards and authorization match): "demo"
	// selects "demo" and "demo/run1", never "demo2". "" selects every
	// shard.
	Prefix string
	// RowsPerFile bounds the records of one part; default
	// DefaultRowsPerFile.
	RowsPerFile int
	// Compression of the parts' columns; default zstd.
	Compression Compression
	// StatePath, when set, is a local JSON file that caches each shard's
	// highest exported seq. The parts win over it; see the package doc.
	StatePath string
	// Progress, when set, is called after each batch of a shard, and once
	// with Done when the shard ends.
	Progress func(Progress)
	// Logger; nil means none.
	Logger *zap.Logger

	// hook, in tests, runs before every step that changes what is
	// published; its error stops the run there, as a crash would.
	hook func(step string) error
}

// Progress is a shard's progress so far in this run.
type Progress struct {
	Shard   string
	Records int64
	Bytes   int64 // approximate size of the records read
	Elapsed time.Duration
	Done    bool
}

// The statuses of a shard in a Summary.
const (
	StatusExported = "exported"   // new parts published
	StatusUpToDate = "up_to_date" // nothing after the published parts
	StatusGone     = "gone"       // deleted from the source
	StatusFailed   = "failed"
)

// ShardResult is what a run did to one shard.
type ShardResult struct {
	Shard  string `json:"shard"`
	Status string `json:"status"`
	// AfterSeq is the highest seq published before this run (0: none).
	AfterSeq uint64 `json:"after_seq"`
	// LastSeq is the highest seq published after it.
	LastSeq     uint64   `json:"last_seq"`
	Records     int64    `json:"records"`
	RecordBytes int64    `json:"record_bytes"`
	Parts       []string `json:"parts,omitempty"`
	Seconds     float64  `json:"seconds"`
	Note        string   `json:"note,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// Summary is what a run did.
type Summary struct {
	Dest        string        `json:"dest"`
	Prefix      string        `json:"prefix"`
	Shards      []ShardResult `json:"shards"`
	Records     int64         `json:"records"`
	Parts       int           `json:"parts"`
	RecordBytes int64         `json:"record_bytes"`
	Failed      int           `json:"failed"`
	Seconds     float64       `json:"seconds"`
}

// ShardDir is the Hive-style directory of a shard's parts: "shard=" and
// the URL-escaped shard name, as on Azure, whose blob names have room for
// every valid shard. A local directory uses LocalShardDir.
func ShardDir(shard string) string { return "shard=" + url.PathEscape(shard) + "/" }

// maxDirName is the longest name of one path element that local file
// systems take (NAME_MAX: 255 bytes on ext4, xfs, btrfs and tmpfs).
const maxDirName = 255

// LocalShardDir is ShardDir where it fits one path element of a local file
// system. A shard name of up to 255 bytes with its '/'s escaped ("%2F")
// and "shard=" before it can pass that; such a shard's directory is
// "shard=~" and the hex SHA-256 of the name instead. Shard names hold no
// '~', so that names no other shard's directory, and the parts' shard
// column holds the real name: it is the authority (docs/export.md).
func LocalShardDir(shard string) string {
	if d := ShardDir(shard); len(d)-1 <= maxDirName {
		return d
	}
	sum := sha256.Sum256([]byte(shard))
	return "shard=~" + hex.EncodeToString(sum[:]) + "/"
}

// shardDirOf is the directory of a shard's parts in dest.
func shardDirOf(dest Dest, shard string) string {
	if d, ok := dest.(interface{ ShardDir(string) string }); ok {
		return d.ShardDir(shard)
	}
	return ShardDir(shard)
}

// PartName names the part holding seqs first..last in dir.
func PartName(dir string, first, last uint64) string {
	return fmt.Sprintf("%spart-%d-%d.parquet", dir, first, last)
}

// partRange is a published part's seq range, from its name.
type partRange struct {
	name        string
	first, last uint64
}

func parsePart(name string) (partRange, bool) {
	rest, ok := strings.CutPrefix(path.Base(name), "part-")
	if !ok {
		return partRange{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".parquet")
	if !ok {
		return partRange{}, false
	}
	a, b, ok := strings.Cut(rest, "-")
	if !ok {
		return partRange{}, false
	}
	first, err1 := strconv.ParseUint(a, 10, 64)
	last, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || first == 0 || first > last {
		return partRange{}, false
	}
	return partRange{name, first, last}, true
}

// published reads the parts of dir and returns the highest seq they hold.
// Parts that overlap mean two exports wrote DEST at once, or a hand edit:
// the run refuses the shard rather than add to it.
func published(ctx context.Context, d Dest, dir string) (uint64, int, error) {
	names, err := d.List(ctx, dir)
	if err != nil {
		return 0, 0, err
	}
	var parts []partRange
	for _, n := range names {
		if p, ok := parsePart(n); ok {
			parts = append(parts, p)
		}
	}
	slices.SortFunc(parts, func(a, b partRange) int { return compareU64(a.first, b.first) })
	var high uint64
	for i, p := range parts {
		if i > 0 && p.first <= parts[i-1].last {
			return 0, 0, fmt.Errorf("export: parts %s and %s overlap: were two exports writing %s at once? Remove one of them", path.Base(parts[i-1].name), path.Base(p.name), d)
		}
		high = max(high, p.last)
	}
	return high, len(parts), nil
}

// partsKept says what DEST keeps of a shard gone from the source, read from
// DEST itself: the state file is only a cache of it.
func partsKept(ctx context.Context, d Dest, sh string) string {
	_, n, err := published(ctx, d, shardDirOf(d, sh))
	switch {
	case err != nil:
		return "its parts, if any, stay in DEST"
	case n == 0:
		return "DEST holds no parts of it"
	case n == 1:
		return "its 1 part stays in DEST"
	}
	return fmt.Sprintf("its %d parts stay in DEST", n)
}

func compareU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func step(opts Options, name string) error {
	if opts.hook == nil {
		return nil
	}
	return opts.hook(name)
}

func exportShard(ctx context.Context, opts Options, st *state, sh string) (res ShardResult) {
	start := time.Now()
	res = ShardResult{Shard: sh}
	defer func() {
		res.Seconds = time.Since(start).Seconds()
		if opts.Progress != nil {
			opts.Progress(Progress{Shard: sh, Records: res.Records, Bytes: res.RecordBytes, Elapsed: time.Since(start), Done: true})
		}
	}()
	fail := func(err error) ShardResult {
		if errors.Is(err, ErrShardGone) {
			res.Status, res.Note = StatusGone, "deleted while it was exported; DEST holds no parts of it"
			if res.AfterSeq > 0 || len(res.Parts) > 0 {
				res.Note = "deleted while it was exported; the parts published before stay in DEST"
			}
			return res
		}
		res.Status, res.Error = StatusFailed, err.Error()
		opts.Logger.Error("export failed", zap.String("shard", sh), zap.Error(err))
		return res
	}
	dir := shardDirOf(opts.Dest, sh)
	high, n, err := published(ctx, opts.Dest, dir)
	if err != nil {
		return fail(err)
	}
	res.AfterSeq, res.LastSeq = high, high
	if cached, ok := st.Shards[sh]; ok && cached.LastSeq != high {
		res.Note = fmt.Sprintf("the state file said seq %d, the %d published parts say %d: the parts win", cached.LastSeq, n, high)
		opts.Logger.Info("state file disagrees with the published parts", zap.String("shard", sh), zap.Uint64("state_seq", cached.LastSeq), zap.Uint64("parts_seq", high))
	}

	// The scan reads the next batch while this goroutine writes the last.
	batches := make(chan []*rolloutv1.Record, 2)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(batches)
		return opts.Source.Scan(gctx, sh, high, func(b []*rolloutv1.Record) error {
			select {
			case batches <- b:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		})
	})
	g.Go(func() error {
		w := &shardWriter{opts: opts, dir: dir, shard: sh, res: &res, start: start}
		defer w.discard()
		for b := range batches {
			if err := w.add(gctx, b); err != nil {
				return err
			}
		}
		return w.finish(gctx)
	})
	if err := g.Wait(); err != nil {
		return fail(err)
	}
	res.Status = StatusUpToDate
	if len(res.Parts) > 0 {
		res.Status = StatusExported
	}
	return res
}

// shardWriter cuts a shard's records into parts and publishes them.
type shardWriter struct {
	opts  Options
	dir   string
	shard string
	res   *ShardResult
	start time.Time

	part Part
	pw   *partWriter
}

func (w *shardWriter) add(ctx context.Context, recs []*rolloutv1.Record) error {
	for len(recs) > 0 {
		if w.pw == nil {
			if err := step(w.opts, "create"); err != nil {
				return err
			}
			part, err := w.opts.Dest.Create(ctx, w.dir)
			if err != nil {
				return err
			}
			pw, err := newPartWriter(part, w.shard, w.opts.Compression)
			if err != nil {
				part.Discard()
				return err
			}
			w.part, w.pw = part, pw
		}
		n := min(len(recs), w.opts.RowsPerFile-w.pw.n)
		if err := step(w.opts, "write"); err != nil {
			return err
		}
		if err := w.pw.write(recs[:n]); err != nil {
			return err
		}
		for _, r := range recs[:n] {
			w.res.RecordBytes += approxSize(r)
		}
		w.res.Records += int64(n)
		recs = recs[n:]
		if w.pw.n == w.opts.RowsPerFile {
			if err := w.publish(ctx); err != nil {
				return err
			}
		}
		if w.opts.Progress != nil {
			w.opts.Progress(Progress{Shard: w.shard, Records: w.res.Records, Bytes: w.res.RecordBytes, Elapsed: time.Since(w.start)})
		}
	}
	return nil
}

func (w *shardWriter) publish(ctx context.Context) error {
	if err := w.pw.close(); err != nil {
		return err
	}
	name := PartName(w.dir, w.pw.first, w.pw.last)
	if err := step(w.opts, "publish"); err != nil {
		return err
	}
	if err := w.part.Publish(ctx, name); err != nil {
		return err
	}
	w.res.Parts = append(w.res.Parts, name)
	w.res.LastSeq = w.pw.last
	w.part, w.pw = nil, nil
	return nil
}

func (w *shardWriter) finish(ctx context.Context) error {
	if w.pw == nil || w.pw.n == 0 {
		return nil
	}
	return w.publish(ctx)
}

// discard drops a part left unpublished by an error.
func (w *shardWriter) discard() {
	if w.part != nil {
		w.part.Discard()
		w.part, w.pw = nil, nil
	}
}

// approxSize is a record's size for progress figures, without the cost
// of encoding it.
func approxSize(r *rolloutv1.Record) int64 {
	return int64(len(r.GetContent()) + len(r.GetBinaryPayload()) + len(r.GetLossMask()) +
		4*(len(r.GetInputTokens())+len(r.GetOutputTokens())+len(r.GetOutputLogprobs())+len(r.GetRefLogprobs())) +
		len(r.GetId()) + len(r.GetRolloutId()) + len(r.GetProblemId()) + 64)
}
