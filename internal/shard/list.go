package shard

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// ErrBadPageToken: a ListShards page token that this listing did not
// issue (another prefix, or not a token at all).
var ErrBadPageToken = fmt.Errorf("invalid page token")

// ShardPage is one page of a shard listing.
type ShardPage struct {
	Shards []string
	// Next continues the listing; "" on the last page.
	Next string
}

// shardDelimiter rolls up everything stored under a shard into one entry
// of a delimited listing: "shards/<shard>/_". A shard's own blobs all start
// with "_" (format/names.go), and a shard segment never does.
const shardDelimiter = "/_"

// ListShards lists the shards that prefix covers on whole segments (""
// covers every shard), at most max (a backend default when <= 0) a page,
// in the byte order of shard + "/_", the order of their storage names: a
// shard lists after "a-x" and before "a/b", and "a/0" lists before "a". A
// shard is listed while it has any blob, its tombstone included: a page
// costs one delimited listing, with no manifest read. token is the Next of
// the previous page of the same prefix. A page may hold fewer shards than
// max, even none, and still have a next page.
func ListShards(ctx context.Context, store blob.Store, prefix, token string, max int) (ShardPage, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	next, err := decodePageToken(prefix, token)
	if err != nil {
		return ShardPage{}, err
	}
	// Without the trailing "/", the listing rolls the prefix shard's own
	// blobs up too ("shards/p/_"), at the price of passing over
	// neighbours such as "p-x" and "p0", which are skipped.
	storagePrefix := format.ShardsRoot + prefix
	page, err := store.ListDelimited(ctx, storagePrefix, shardDelimiter, next, max)
	if err != nil {
		return ShardPage{}, fmt.Errorf("list shards under %q: %w", prefix, err)
	}
	var out ShardPage
	root := format.ShardsRoot
	under := storagePrefix + "/" // "shards/p/" covers p's own and its children's
	done := false
	for _, p := range page.Prefixes {
		if prefix != "" && !strings.HasPrefix(p, under) {
			if p > under {
				done = true // past everything the prefix covers
				break
			}
			continue
		}
		shard, ok := strings.CutSuffix(strings.TrimPrefix(p, root), shardDelimiter)
		if !ok || shard == "" {
			continue
		}
		out.Shards = append(out.Shards, shard)
	}
	if page.Next != "" && !done {
		out.Next = encodePageToken(prefix, page.Next)
	}
	return out, nil
}

// A page token binds the store's token to the listing's prefix, so that a
// token is never applied to another listing.
func encodePageToken(prefix, next string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("1\x00" + prefix + "\x00" + next))
}

func decodePageToken(prefix, token string) (string, error) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil {
		return "", fmt.Errorf("%w: not one ListShards issued", ErrBadPageToken)
	}
	parts := strings.SplitN(string(b), "\x00", 3)
	if len(parts) != 3 || parts[0] != "1" {
		return "", fmt.Errorf("%w: not one ListShards issued", ErrBadPageToken)
	}
	if parts[1] != prefix {
		return "", fmt.Errorf("%w: issued for prefix %q, not %q", ErrBadPageToken, parts[1], prefix)
	}
	return parts[2], nil
}
