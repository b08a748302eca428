package export

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// ErrShardGone: a shard listed at the start of the run was not found when
// it was scanned (deleted meanwhile).
var ErrShardGone = errors.New("export: shard not found")

// ErrNoShards: the selection matched no shard, so a run would export
// nothing and say it succeeded.
var ErrNoShards = errors.New("export: no shard matched")

// SelectionError is an ErrNoShards that says what was asked.
type SelectionError struct {
	// Prefix is the prefix asked, when no shard is under it.
	Prefix string
	// Missing are the shards named (ClientSource.ShardNames) that do not
	// exist: never written, or deleted and their storage reclaimed.
	Missing []string
}

func (e *SelectionError) Error() string {
	switch {
	case len(e.Missing) == 1:
		return fmt.Sprintf("no shard %q (never written, or deleted and reclaimed)", e.Missing[0])
	case len(e.Missing) > 1:
		return fmt.Sprintf("no shards %s (never written, or deleted and reclaimed)", quoteAll(e.Missing))
	case e.Prefix == "":
		return "no shards: the source holds none"
	}
	return fmt.Sprintf("no shard under prefix %q", e.Prefix)
}

func (e *SelectionError) Is(target error) bool { return target == ErrNoShards }

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// ShardRef is a shard a Source lists.
type ShardRef struct {
	Name string
	// Incarnation counts the times the shard was deleted (issue 23's
	// DeleteShard); a shard deleted and written again has a higher one.
	Incarnation uint64
	// Deleted: the shard is a tombstone; its records are gone.
	Deleted bool
	// Err, if set, is why the shard could not be described (a corrupt
	// manifest): it is reported as failed, and the others go on.
	Err string
}

// Source is where records come from.
type Source interface {
	// Shards lists the shards that prefix covers on whole segments
	// (validate.Covers; "" covers all), sorted by name, deleted ones
	// included, and those that cannot be described with their Err: its
	// error is for the listing as a whole.
	Shards(ctx context.Context, prefix string) ([]ShardRef, error)
	// Scan delivers the shard's records with seq > after, in seq order,
	// in batches; emit may keep a batch.
	Scan(ctx context.Context, shard string, after uint64, emit func([]*rolloutv1.Record) error) error
}

// StoreSource reads storage directly, through internal/shard's reader.
type StoreSource struct {
	Store  blob.Store
	Reader *shard.Reader
}

// sourceCacheBytes bounds the reader's cache of generation indexes: a
// scan reads each generation's index once, so a cache the size of a large
// shard's indexes would only make export's memory grow with the shard.
const sourceCacheBytes = 1 << 20

// NewStoreSource reads store.
func NewStoreSource(store blob.Store) *StoreSource {
	return &StoreSource{Store: store, Reader: shard.NewReader(store, shard.ReaderOptions{Cache: shard.NewBlobCache(sourceCacheBytes)})}
}

// Shards lists the shards under prefix as ListShards does, and reads each
// one's manifest to tell a deleted shard and its incarnation; a shard
// whose manifest cannot be read is listed with its error, and one with
// blobs but no manifest (its storage being reclaimed) is not listed.
func (s *StoreSource) Shards(ctx context.Context, prefix string) ([]ShardRef, error) {
	var shards []string
	token := ""
	for {
		page, err := shard.ListShards(ctx, s.Store, prefix, token, 0)
		if err != nil {
			return nil, fmt.Errorf("export: list shards: %w", err)
		}
		shards = append(shards, page.Shards...)
		if token = page.Next; token == "" {
			break
		}
	}
	slices.Sort(shards)
	refs := make([]ShardRef, 0, len(shards))
	for _, sh := range shards {
		info, err := s.Reader.Describe(ctx, sh)
		switch {
		case errors.Is(err, shard.ErrShardNotFound):
			continue // deleted and reclaimed since the listing
		case ctx.Err() != nil:
			return nil, fmt.Errorf("export: describe shard %q: %w", sh, err)
		case err != nil && !errors.Is(err, shard.ErrShardDeleted):
			// One bad shard fails only itself.
			refs = append(refs, ShardRef{Name: sh, Err: fmt.Sprintf("describe: %v", err)})
			continue
		}
		refs = append(refs, ShardRef{Name: sh, Incarnation: info.Incarnation, Deleted: info.Deleted})
	}
	return refs, nil
}

// scanBatch is how many records one delivered batch holds at most.
const scanBatch = 256

// Scan reads the shard with large ranged reads.
func (s *StoreSource) Scan(ctx context.Context, sh string, after uint64, emit func([]*rolloutv1.Record) error) error {
	err := s.Reader.Scan(ctx, sh, shard.ScanOptions{AfterSeq: after, BatchRecords: scanBatch, BatchBytes: 1 << 20, ReadBytes: 1 << 20}, func(b shard.Batch) error {
		return emit(b.Records)
	})
	if errors.Is(err, shard.ErrShardNotFound) || errors.Is(err, shard.ErrShardDeleted) {
		return fmt.Errorf("%w: %q: %w", ErrShardGone, sh, err)
	}
	return err
}

// ClientSource reads through a running rolloutd's Scan, and lists shards
// with its ListShards, or takes the ones it is told of.
type ClientSource struct {
	Client *client.Client
	// ShardNames, when set, are the only shards to export (--shard);
	// Shards then describes them instead of listing every shard. Each
	// must exist and be under the prefix: a selection that matches
	// nothing is a mistake, not an empty export.
	ShardNames []string
}

// NamedShards says that Shards lists only the shards it was told of, not
// every shard there is: one it does not list is not gone.
func (c *ClientSource) NamedShards() bool { return len(c.ShardNames) > 0 }

// Shards lists the shards under prefix with ListShards, or describes the
// named ones.
func (c *ClientSource) Shards(ctx context.Context, prefix string) ([]ShardRef, error) {
	if len(c.ShardNames) > 0 {
		var refs []ShardRef
		var missing []string
		names := slices.Clone(c.ShardNames)
		slices.Sort(names)
		for _, sh := range slices.Compact(names) {
			if !validate.Covers(prefix, sh) {
				return nil, fmt.Errorf("export: shard %q is not under prefix %q", sh, prefix)
			}
			info, err := c.Client.DescribeShard(ctx, sh)
			switch {
			case errors.Is(err, client.ErrShardDeleted):
				refs = append(refs, ShardRef{Name: sh, Deleted: true})
			case errors.Is(err, client.ErrNotFound):
				missing = append(missing, sh)
			case ctx.Err() != nil:
				return nil, fmt.Errorf("export: describe shard %q through the server: %w", sh, err)
			case err != nil:
				refs = append(refs, ShardRef{Name: sh, Err: fmt.Sprintf("describe through the server: %v", err)})
			default:
				refs = append(refs, ShardRef{Name: sh, Incarnation: info.GetIncarnation()})
			}
		}
		if len(missing) > 0 {
			return nil, &SelectionError{Missing: missing}
		}
		return refs, nil
	}
	var refs []ShardRef
	token := ""
	for {
		resp, err := c.Client.ListShards(ctx, &rolloutv1.ListShardsRequest{Prefix: prefix, PageSize: 1000, PageToken: token, IncludeSummary: true})
		if err != nil {
			return nil, fmt.Errorf("export: list shards through the server: %w", err)
		}
		for _, l := range resp.GetShards() {
			ref := ShardRef{Name: l.GetShard(), Incarnation: l.GetSummary().GetIncarnation(), Deleted: l.GetSummary().GetDeleted()}
			if e := l.GetSummaryError(); e != "" {
				ref = ShardRef{Name: l.GetShard(), Err: "summary from the server: " + e}
			}
			refs = append(refs, ref)
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	slices.SortFunc(refs, func(a, b ShardRef) int { return strings.Compare(a.Name, b.Name) })
	return refs, nil
}

// Scan streams the shard; the client resumes a broken stream from its
// cursor by itself.
func (c *ClientSource) Scan(ctx context.Context, sh string, after uint64, emit func([]*rolloutv1.Record) error) error {
	batch := make([]*rolloutv1.Record, 0, scanBatch)
	for rec, err := range c.Client.Scan(ctx, sh, client.AfterSeq(after)) {
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("%w: %q: %w", ErrShardGone, sh, err)
		}
		if err != nil {
			return fmt.Errorf("export: scan %q through the server: %w", sh, err)
		}
		batch = append(batch, rec)
		if len(batch) == cap(batch) {
			if err := emit(batch); err != nil {
				return err
			}
			batch = make([]*rolloutv1.Record, 0, scanBatch)
		}
	}
	if len(batch) > 0 {
		return emit(batch)
	}
	return nil
}
