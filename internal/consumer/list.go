package consumer

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// ErrBadPageToken: a page token this listing did not issue: not a token,
// another prefix or caller, or a position the caller may not list.
var ErrBadPageToken = errors.New("invalid page token")

// Page is one page of a listing of consumers.
type Page struct {
	// Consumers in the byte order of their blob names.
	Consumers []*Consumer
	// Next continues the listing; "" on the last page.
	Next string
}

// ListOptions say what one listing may see.
type ListOptions struct {
	// Prefix: the consumers whose prefix it covers on whole segments; ""
	// lists every consumer.
	Prefix string
	// Grants, unless Unrestricted, are the shard prefixes ("*" for all)
	// the caller may see consumers of: a consumer is listed when a grant
	// covers its whole prefix, and the listing reads no stored name
	// outside them.
	Grants       []string
	Unrestricted bool
	// Caller is the identity the page tokens are bound to.
	Caller string
	// Token is the Next of the previous page of the same listing.
	Token string
	// Max bounds the page; <= 0 is 100. Each consumer listed is one read.
	Max int
}

// noDelimiter is a delimiter no blob name holds (names have no empty
// segment): nothing rolls up, and a listing can still start after a name
// on every backend (a blob.DelimitedToken).
const noDelimiter = "//"

// List lists the consumers whose prefix lies under prefix; see ListIn.
func (s *Store) List(ctx context.Context, prefix, token string, max int) (Page, error) {
	return s.ListIn(ctx, ListOptions{Prefix: prefix, Unrestricted: true, Token: token, Max: max})
}

// ListIn lists the consumers under opts.Prefix that opts.Grants cover, at
// most Max a page, each read whole (a consumer deleted meanwhile is left
// out, and so is one whose stored bytes do not verify, with a warning:
// Load answers its ErrCorrupt). Errors: validate.ErrInvalid (the prefix), ErrBadPageToken,
// ErrCorrupt, and the store's classes wrapped.
func (s *Store) ListIn(ctx context.Context, opts ListOptions) (Page, error) {
	prefix, err := NormalizePrefix("prefix", opts.Prefix)
	if err != nil {
		return Page{}, err
	}
	scopes := listScopes(prefix, opts.Grants, opts.Unrestricted)
	after, err := decodePageToken(opts.Token, prefix, opts.Caller)
	if err != nil {
		return Page{}, err
	}
	if after != (Key{}) && !slices.ContainsFunc(scopes, func(sc string) bool { return validate.Covers(sc, after.Prefix) }) {
		return Page{}, fmt.Errorf("%w: its position is not one this caller may list", ErrBadPageToken)
	}
	max := opts.Max
	if max <= 0 {
		max = 100
	}
	afterName := ""
	if after != (Key{}) {
		afterName = blobName(after)
	}
	var out Page
	for i, scope := range scopes {
		sroot := scopeRoot(scope)
		tok := ""
		switch {
		case afterName == "" || afterName < sroot:
		case strings.HasPrefix(afterName, sroot):
			tok = blob.DelimitedToken{Last: afterName}.Encode()
		default:
			continue // wholly before the position
		}
		more, err := s.listScope(ctx, scope, tok, max, &out)
		if err != nil {
			return Page{}, err
		}
		if len(out.Consumers) == max {
			if more || i < len(scopes)-1 {
				out.Next = encodePageToken(prefix, opts.Caller, out.Consumers[len(out.Consumers)-1].Key)
			}
			break
		}
	}
	return out, nil
}

// listScope appends the consumers stored under scope after tok to out,
// until out holds max; more reports that the scope may hold more.
func (s *Store) listScope(ctx context.Context, scope, tok string, max int, out *Page) (more bool, err error) {
	for len(out.Consumers) < max {
		page, err := s.store.List(ctx, blob.ListOptions{Prefix: scopeRoot(scope), Delimiter: noDelimiter, Token: tok, Max: max - len(out.Consumers)})
		if err != nil {
			return false, fmt.Errorf("list consumers under %q: %w", scope, err)
		}
		for _, it := range page.Items {
			k, ok := parseBlobName(it.Name)
			if !ok || !validate.Covers(scope, k.Prefix) {
				continue // not a consumer's blob
			}
			r, _, err := s.read(ctx, k)
			switch {
			case errors.Is(err, ErrNotFound):
				continue // deleted since the listing
			case errors.Is(err, ErrCorrupt):
				// One bad consumer fails only itself (Load answers its
				// error); the listing goes on without it.
				s.log.Warn("consumer left out of a listing: stored bytes do not verify", zap.String("consumer", k.String()),
					zap.String("prefix", k.Prefix), zap.Error(err))
				continue
			case err != nil:
				return false, err
			}
			out.Consumers = append(out.Consumers, r.c)
		}
		if page.Next == "" {
			return false, nil
		}
		tok = page.Next
	}
	return true, nil
}

// listScopes is what a listing of prefix by a caller holding grants may
// read: the narrower of prefix and each grant where they overlap, without
// a scope another covers, in storage order. A consumer lies in a scope
// when the scope covers its whole prefix.
func listScopes(prefix string, grants []string, unrestricted bool) []string {
	if unrestricted {
		grants = []string{validate.AllShards}
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

// pageTokenVersion is the first field of a page token.
const pageTokenVersion = "c1"

// A page token binds the last consumer shown to the listing's prefix and
// caller. It holds nothing the caller was not shown, so it needs no key:
// a forged one can only name a position the caller may list anyway, and
// ListIn checks that it is one.
func encodePageToken(prefix, caller string, last Key) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenVersion + "\x00" + prefix + "\x00" + callerTag(caller) + "\x00" + last.Prefix + "\x00" + last.Name))
}

// decodePageToken returns the last consumer the previous page showed, the
// zero Key for the first page.
func decodePageToken(token, prefix, caller string) (Key, error) {
	if token == "" {
		return Key{}, nil
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil {
		return Key{}, fmt.Errorf("%w: not one ListConsumers issued", ErrBadPageToken)
	}
	parts := strings.Split(string(b), "\x00")
	switch {
	case len(parts) != 5 || parts[0] != pageTokenVersion:
		return Key{}, fmt.Errorf("%w: not one this version of ListConsumers issued; list from the start", ErrBadPageToken)
	case parts[1] != prefix:
		return Key{}, fmt.Errorf("%w: issued for another prefix", ErrBadPageToken)
	case parts[2] != callerTag(caller):
		return Key{}, fmt.Errorf("%w: issued to another caller", ErrBadPageToken)
	}
	k := Key{Prefix: parts[3], Name: parts[4]}
	if nk, err := k.Normalize(); err != nil || nk != k || !validate.Covers(prefix, k.Prefix) {
		return Key{}, fmt.Errorf("%w: not one ListConsumers issued", ErrBadPageToken)
	}
	return k, nil
}

// callerTag stands for the caller in a token without naming it.
func callerTag(caller string) string {
	h := sha256.Sum256([]byte("rolloutd consumer list token\x00" + caller))
	return hex.EncodeToString(h[:8])
}
