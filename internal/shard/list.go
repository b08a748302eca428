package shard

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// ErrBadPageToken: a ListShards page token that this listing did not
// issue: not a token, another prefix or caller, or a position the caller
// may no longer list.
var ErrBadPageToken = fmt.Errorf("invalid page token")

// ShardPage is one page of a shard listing.
type ShardPage struct {
	Shards []string
	// Next continues the listing; "" on the last page.
	Next string
}

// ListOptions says what one listing may see.
type ListOptions struct {
	// Prefix covers shards on whole segments; "" covers every shard.
	Prefix string
	// Grants, unless Unrestricted, are the shard prefixes the caller may
	// list (authz's, "*" for all): the listing touches no stored name
	// outside them, so that neither a token nor its timing can carry a
	// name the caller may not see.
	Grants       []string
	Unrestricted bool
	// Caller is the identity the page tokens are bound to.
	Caller string
	// Token is the Next of the previous page of the same listing.
	Token string
	// Max bounds the page (a backend default when <= 0).
	Max int
}

// shardDelimiter rolls up everything stored under a shard into one entry
// of a delimited listing: "shards/<shard>/_". A shard's own blobs all start
// with "_" (format/names.go), and a shard segment never does.
const shardDelimiter = "/_"

// ListShards lists every shard that prefix covers; see List.
func ListShards(ctx context.Context, store blob.Store, prefix, token string, max int) (ShardPage, error) {
	return List(ctx, store, ListOptions{Prefix: prefix, Unrestricted: true, Token: token, Max: max})
}

// List lists the shards under opts.Prefix that opts.Grants cover, at most
// Max a page, in the byte order of shard + "/_", the order of their
// storage names: a shard lists after "a-x" and before "a/b", and "a/0"
// lists before "a". A shard is listed while it has any blob, its
// tombstone included; no manifest is read. Each scope (a granted prefix
// within Prefix) is listed on its own, under "shards/<scope>/", so that no
// neighbour ("a-x" beside "a") is ever passed over. A page token names
// only the last shard the caller was shown; the next page starts after it.
// Only the last page may be empty.
func List(ctx context.Context, store blob.Store, opts ListOptions) (ShardPage, error) {
	prefix := strings.TrimSuffix(opts.Prefix, "/")
	scopes := listScopes(prefix, opts.Grants, opts.Unrestricted)
	after, err := decodePageToken(opts.Token, prefix, opts.Caller)
	if err != nil {
		return ShardPage{}, err
	}
	if after != "" && !slices.ContainsFunc(scopes, func(sc string) bool { return validate.Covers(sc, after) }) {
		return ShardPage{}, fmt.Errorf("%w: its position is not one this caller may list", ErrBadPageToken)
	}
	max := opts.Max
	if max <= 0 {
		max = 1000
	}
	var out ShardPage
	afterKey := ""
	if after != "" {
		afterKey = format.ShardsRoot + after + shardDelimiter
	}
	for i, scope := range scopes {
		root := scopeRoot(scope)
		tok := ""
		switch {
		case afterKey == "" || afterKey < root:
		case strings.HasPrefix(afterKey, root):
			tok = blob.DelimitedToken{Last: afterKey, IsPrefix: true}.Encode()
		default:
			continue // wholly before the position
		}
		more, err := listScope(ctx, store, scope, tok, max, &out)
		if err != nil {
			return ShardPage{}, err
		}
		if len(out.Shards) == max {
			if more || i < len(scopes)-1 {
				out.Next = encodePageToken(prefix, opts.Caller, out.Shards[len(out.Shards)-1])
			}
			break
		}
	}
	return out, nil
}

// listScope appends the shards of one scope after tok to out, until out
// holds max; more reports that the scope may hold more.
func listScope(ctx context.Context, store blob.Store, scope, tok string, max int, out *ShardPage) (more bool, err error) {
	root := scopeRoot(scope)
	own := root + "_" // the scope shard's own blobs, listed as items
	if scope == "" {
		own = "\xff" // no shard is named ""
	}
	for len(out.Shards) < max {
		page, err := store.List(ctx, blob.ListOptions{Prefix: root, Delimiter: shardDelimiter, Token: tok, Max: max - len(out.Shards)})
		if err != nil {
			return false, fmt.Errorf("list shards under %q: %w", scope, err)
		}
		sawOwn, lastOwn := false, false
		for _, it := range page.Items {
			if strings.HasPrefix(it.Name, own) {
				sawOwn = true
			}
		}
		// Merge the scope shard (its items' place is own) into the
		// prefixes, in order.
		for _, p := range page.Prefixes {
			if sawOwn && p > own {
				out.Shards = append(out.Shards, scope)
				sawOwn = false
			}
			name, ok := strings.CutSuffix(strings.TrimPrefix(p, format.ShardsRoot), shardDelimiter)
			if ok && name != "" {
				out.Shards = append(out.Shards, name)
			}
		}
		if sawOwn {
			out.Shards = append(out.Shards, scope)
			lastOwn = true
		}
		switch {
		case page.Next == "":
			return false, nil
		case lastOwn:
			// Skip the rest of the scope shard's own blobs: it is listed.
			tok = blob.DelimitedToken{Last: own, IsPrefix: true}.Encode()
		default:
			tok = page.Next
		}
	}
	return true, nil
}

// scopeRoot is the storage prefix of a scope's shards: "shards/" for all,
// "shards/<scope>/" for a scope and the shards under it.
func scopeRoot(scope string) string {
	if scope == "" {
		return format.ShardsRoot
	}
	return format.ShardsRoot + scope + "/"
}

// allShards is authz's grant of every shard.
const allShards = validate.AllShards

// listScopes is what a listing of prefix by a caller holding grants may
// touch: the narrower of prefix and each grant where they overlap, without
// a scope another covers, in storage order (disjoint scopes' storage
// prefixes do not interleave).
func listScopes(prefix string, grants []string, unrestricted bool) []string {
	if unrestricted {
		grants = []string{allShards}
	}
	var scopes []string
	for _, g := range grants {
		switch {
		case validate.Covers(g, prefix):
			scopes = append(scopes, prefix)
		case validate.Covers(prefix, g):
			scopes = append(scopes, g)
		}
	}
	slices.SortFunc(scopes, func(a, b string) int { return strings.Compare(scopeRoot(a), scopeRoot(b)) })
	kept := scopes[:0]
	for _, sc := range scopes {
		if len(kept) > 0 && validate.Covers(kept[len(kept)-1], sc) {
			continue
		}
		kept = append(kept, sc)
	}
	return kept
}

// pageTokenVersion is the first field of a page token. Version 1 carried
// the store's continuation marker, a stored name that could be another
// team's; such tokens are refused.
const pageTokenVersion = "2"

// A page token binds the last shard shown to the listing's prefix and
// caller. It is opaque to clients, but holds nothing they were not shown,
// so it needs no key: a forged one can only name a position the caller
// may list anyway, and List checks that it is one.
func encodePageToken(prefix, caller, last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenVersion + "\x00" + prefix + "\x00" + callerTag(caller) + "\x00" + last))
}

// decodePageToken returns the last shard the previous page showed, ""
// for the first page.
func decodePageToken(token, prefix, caller string) (string, error) {
	if token == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil {
		return "", fmt.Errorf("%w: not one ListShards issued", ErrBadPageToken)
	}
	parts := strings.Split(string(b), "\x00")
	switch {
	case len(parts) != 4 || parts[0] != pageTokenVersion:
		return "", fmt.Errorf("%w: not one this version of ListShards issued; list from the start", ErrBadPageToken)
	case parts[1] != prefix:
		return "", fmt.Errorf("%w: issued for another prefix", ErrBadPageToken)
	case parts[2] != callerTag(caller):
		return "", fmt.Errorf("%w: issued to another caller", ErrBadPageToken)
	}
	last := parts[3]
	if err := validate.Shard(last); err != nil || !validate.Covers(prefix, last) {
		return "", fmt.Errorf("%w: not one ListShards issued", ErrBadPageToken)
	}
	return last, nil
}

// callerTag stands for the caller in a token without naming it.
func callerTag(caller string) string {
	h := sha256.Sum256([]byte("rolloutd list token\x00" + caller))
	return hex.EncodeToString(h[:8])
}
