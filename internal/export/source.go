package export

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// ErrShardGone: a shard listed at the start of the run was not found when
// it was scanned (deleted meanwhile).
var ErrShardGone = errors.New("export: shard not found")

// Source is where records come from.
type Source interface {
	// Shards lists the shards whose names start with prefix, sorted.
	Shards(ctx context.Context, prefix string) ([]string, error)
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

// shardsRoot is the prefix of every shard's blobs ("shards/").
var shardsRoot = strings.TrimSuffix(format.ShardPrefix("x"), "x/")

// Shards lists the shards that have a manifest.
func (s *StoreSource) Shards(ctx context.Context, prefix string) ([]string, error) {
	manifest := strings.TrimPrefix(format.ManifestName("x"), shardsRoot+"x")
	var shards []string
	token := ""
	for {
		page, err := s.Store.List(ctx, shardsRoot+prefix, token, 0)
		if err != nil {
			return nil, fmt.Errorf("export: list shards: %w", err)
		}
		for _, it := range page.Items {
			if name, ok := strings.CutSuffix(it.Name, manifest); ok {
				shards = append(shards, strings.TrimPrefix(name, shardsRoot))
			}
		}
		if page.Next == "" {
			break
		}
		token = page.Next
	}
	slices.Sort(shards)
	return shards, nil
}

// scanBatch is how many records one delivered batch holds at most.
const scanBatch = 256

// Scan reads the shard with large ranged reads.
func (s *StoreSource) Scan(ctx context.Context, sh string, after uint64, emit func([]*rolloutv1.Record) error) error {
	err := s.Reader.Scan(ctx, sh, shard.ScanOptions{AfterSeq: after, BatchRecords: scanBatch, BatchBytes: 1 << 20, ReadBytes: 1 << 20}, func(b shard.Batch) error {
		return emit(b.Records)
	})
	if errors.Is(err, shard.ErrShardNotFound) {
		return fmt.Errorf("%w: %q", ErrShardGone, sh)
	}
	return err
}

// ClientSource reads through a running rolloutd's Scan. The API lists no
// shards, so the caller names them.
type ClientSource struct {
	Client *client.Client
	// ShardNames are the shards to export (--shard); Shards returns those
	// that start with the prefix.
	ShardNames []string
}

// NamedShards says that Shards lists only the shards it was told of, not
// every shard there is: one it does not list is not gone.
func (c *ClientSource) NamedShards() bool { return true }

// Shards returns the named shards that start with prefix.
func (c *ClientSource) Shards(_ context.Context, prefix string) ([]string, error) {
	var out []string
	for _, s := range c.ShardNames {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Scan streams the shard; the client resumes a broken stream from its
// cursor by itself.
func (c *ClientSource) Scan(ctx context.Context, sh string, after uint64, emit func([]*rolloutv1.Record) error) error {
	batch := make([]*rolloutv1.Record, 0, scanBatch)
	for rec, err := range c.Client.Scan(ctx, sh, client.AfterSeq(after)) {
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("%w: %q", ErrShardGone, sh)
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
