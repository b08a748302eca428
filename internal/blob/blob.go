// Package blob defines the small storage interface that rolloutd's shard
// layer is built on, and the error classes every backend maps its failures to.
//
// Two primitives carry all of rolloutd's correctness: a create-only write and
// a compare-and-swap on an ETag. Every backend (Azure Blob, the embedded
// local-disk store, the in-memory store) must give them identical semantics;
// the conformance suite in package blobtest proves it.
package blob

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Error classes. Backends wrap their native errors so that callers classify
// them with errors.Is and never by matching text.
var (
	// ErrNotFound: the named blob does not exist.
	ErrNotFound = errors.New("blob: not found")
	// ErrConditionFailed: a create-only put found the blob present, or an
	// If-Match put/delete found a different ETag (or no blob). Azure's 409
	// BlobAlreadyExists and 412 ConditionNotMet both map here.
	ErrConditionFailed = errors.New("blob: condition failed")
	// ErrNotModified: a Get with IfNoneMatch found the blob unchanged.
	ErrNotModified = errors.New("blob: not modified")
	// ErrUnavailable: the store throttled or could not be reached, and the
	// request is known not to have been applied. Retrying is safe.
	ErrUnavailable = errors.New("blob: unavailable")
	// ErrOutcomeUnknown: a write may or may not have been applied, and the
	// backend could not tell which. Callers re-read to decide.
	ErrOutcomeUnknown = errors.New("blob: outcome unknown")
	// ErrInvalidName: the blob name is not acceptable; nothing was sent.
	ErrInvalidName = errors.New("blob: invalid name")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("blob: store closed")
	// ErrStoreFailed: the store hit a failure it cannot recover from in
	// this process, such as a failed fsync of data it had already made
	// visible, and it now refuses every call, reads included, until the
	// process restarts: what it would serve may not survive a crash. The
	// write that hit the failure (or was in flight when it happened) also
	// matches ErrOutcomeUnknown, since it may or may not have been applied;
	// every later call matches ErrStoreFailed alone. Unlike ErrUnavailable,
	// retrying in this process never helps.
	ErrStoreFailed = errors.New("blob: store failed")
	// ErrNoSpace: the store is out of space (a full disk, or a spent
	// quota: ENOSPC, EDQUOT), and the write is known not to have been
	// applied. Unlike ErrUnavailable, retrying soon does not help: space
	// returns only when something frees it, so callers fail the write at
	// once rather than retry it until a deadline, and writes succeed again
	// by themselves once there is room. A write that ran out of space
	// after it may have been applied matches ErrOutcomeUnknown instead.
	ErrNoSpace = errors.New("blob: out of space")
)

// ETag identifies one version of a blob. ETags are opaque: compare them only
// for equality and pass them back exactly as received.
type ETag string

// Attrs describes one stored blob.
type Attrs struct {
	Name string
	Size int64
	ETag ETag
	// PutID is the idempotency key of the put that wrote this version, or ""
	// when the writer gave none.
	PutID        string
	LastModified time.Time
}

// GetOptions selects what Get returns.
type GetOptions struct {
	// Offset and Length select a byte range. Length 0 means "to the end".
	// A range past the end is clipped; an Offset at or past the end returns
	// no bytes and no error.
	Offset, Length int64
	// IfNoneMatch makes Get return ErrNotModified when the blob's current
	// ETag equals it.
	IfNoneMatch ETag
}

// PutOptions makes a put conditional and idempotent.
type PutOptions struct {
	// IfNoneMatch makes the put create-only: it fails with
	// ErrConditionFailed when the blob exists.
	IfNoneMatch bool
	// IfMatch makes the put a compare-and-swap: it fails with
	// ErrConditionFailed unless the blob exists with exactly this ETag.
	IfMatch ETag
	// PutID is an idempotency key, unique per logical write. When a
	// conditional put fails its condition only because an earlier attempt
	// with the same PutID already landed (a retry after a lost response),
	// the put reports success with that attempt's ETag instead of
	// ErrConditionFailed. Backends store it with the blob.
	PutID string
}

// DeleteOptions makes a delete conditional.
type DeleteOptions struct {
	// IfMatch, when set, deletes only the version with this ETag.
	IfMatch ETag
}

// ListOptions selects one page of a listing.
type ListOptions struct {
	// Prefix: only names that start with it are listed.
	Prefix string
	// Delimiter, when set, rolls up, as Azure's hierarchical listing does,
	// every name whose remainder after Prefix contains it into one entry of
	// ListPage.Prefixes: the name up to and including the first Delimiter
	// after Prefix. Names without it after Prefix are Items. A rolled-up
	// prefix is listed once across pages and stands for at least one
	// stored blob. "" lists every name as an item.
	Delimiter string
	// Token is "" for the first page or a previous page's Next. With a
	// Delimiter it may also be a DelimitedToken's Encode that a caller
	// built: the listing then continues after it, as if it had been the
	// last entry of a page, so a caller can start a listing at a name
	// without holding a backend's token.
	Token string
	// Max bounds a page, items and prefixes together (a backend default
	// when <= 0; a backend may cap it).
	Max int
}

// ListPage is one page of a listing.
type ListPage struct {
	// Items are in byte-wise order of the full name, as on Azure. Their
	// PutID may be empty: listings need not carry it; Head does.
	Items []Attrs
	// Prefixes are the rolled-up names of a listing with a Delimiter, each
	// ending with it, in byte-wise order. Items and Prefixes interleave in
	// name order across the page.
	Prefixes []string
	// Next continues the listing; "" means this was the last page.
	Next string
}

// Store is the storage interface the shard layer consumes.
//
// Every method returns nil or an error that matches (errors.Is) exactly one of
// the classes above, or an unclassified error for anything else, with one
// exception: a write that makes the store fail returns an error matching both
// ErrStoreFailed and ErrOutcomeUnknown. Every method may return
// ErrStoreFailed once the store has failed. Names are validated with
// ValidateName before anything is sent.
type Store interface {
	// Get reads a blob, whole or a byte range. The returned Attrs describe
	// the whole blob (Size is the blob's size, not the range's). Errors:
	// ErrNotFound, ErrNotModified (with IfNoneMatch), ErrUnavailable,
	// ErrStoreFailed, ErrInvalidName.
	Get(ctx context.Context, name string, opts GetOptions) ([]byte, Attrs, error)
	// Head reads a blob's attributes. Errors: ErrNotFound, ErrUnavailable,
	// ErrStoreFailed, ErrInvalidName.
	Head(ctx context.Context, name string) (Attrs, error)
	// Put writes a whole blob and returns its new attributes. Errors:
	// ErrConditionFailed, ErrUnavailable, ErrNoSpace, ErrOutcomeUnknown,
	// ErrStoreFailed (together with ErrOutcomeUnknown for the put that
	// made the store fail), ErrInvalidName.
	Put(ctx context.Context, name string, data []byte, opts PutOptions) (Attrs, error)
	// Delete removes a blob. Errors: ErrNotFound, ErrConditionFailed (with
	// IfMatch), ErrUnavailable, ErrOutcomeUnknown, ErrStoreFailed (together
	// with ErrOutcomeUnknown for the delete that made the store fail),
	// ErrInvalidName.
	Delete(ctx context.Context, name string, opts DeleteOptions) error
	// List returns one page of the blobs whose names start with
	// opts.Prefix, rolled up at opts.Delimiter when that is set; see
	// ListOptions. Errors: ErrUnavailable, ErrStoreFailed, ErrInvalidName
	// (for the prefix, and for a token that is not one, with a Delimiter).
	List(ctx context.Context, opts ListOptions) (ListPage, error)
}

// ManyDeleter is a Store whose deletes cost less issued together than one
// at a time: the embedded local store's removals in one directory share
// one directory fsync. The shard collector uses it where a store has it;
// wrappers (instrumented, traced) have it exactly when the store they wrap
// does, so that a type assertion finds it through them.
type ManyDeleter interface {
	// DeleteMany deletes each name as Delete would with zero options and
	// returns each one's error, classified as Delete's. Each deletion
	// that succeeded is durable when it returns.
	DeleteMany(ctx context.Context, names []string) []error
}

// RollUp is the entry a listing of prefix shows for name: the name itself
// (isPrefix false) or its rolled-up prefix. Backends that list in name
// order use it to build a ListPage. An empty delimiter rolls up nothing.
func RollUp(prefix, delimiter, name string) (entry string, isPrefix bool) {
	if delimiter == "" {
		return name, false
	}
	rest := name[len(prefix):]
	if i := strings.Index(rest, delimiter); i >= 0 {
		return prefix + rest[:i+len(delimiter)], true
	}
	return name, false
}

// DelimitedToken is where a name-ordered backend's listing resumes: the
// last entry of the page, and whether it was a prefix. Every name at or
// before it, and every name under it when it is a prefix, was listed.
type DelimitedToken struct {
	Last     string
	IsPrefix bool
}

// Encode renders t as an opaque token.
func (t DelimitedToken) Encode() string {
	if t.IsPrefix {
		return "p" + t.Last
	}
	return "n" + t.Last
}

// ParseDelimitedToken is the inverse of Encode; "" is the first page.
func ParseDelimitedToken(s string) (DelimitedToken, error) {
	if s == "" {
		return DelimitedToken{}, nil
	}
	switch s[0] {
	case 'p':
		return DelimitedToken{Last: s[1:], IsPrefix: true}, nil
	case 'n':
		return DelimitedToken{Last: s[1:]}, nil
	}
	return DelimitedToken{}, fmt.Errorf("%w: not a listing token", ErrInvalidName)
}

// ParseToken checks o's prefix and parses its token, for the backends
// that list in name order. A listing without a delimiter takes, and
// TokenAfter gives, the last name listed; one with a delimiter a
// DelimitedToken's Encode.
func (o ListOptions) ParseToken() (DelimitedToken, error) {
	if err := ValidatePrefix(o.Prefix); err != nil {
		return DelimitedToken{}, err
	}
	if o.Delimiter == "" {
		return DelimitedToken{Last: o.Token}, nil
	}
	return ParseDelimitedToken(o.Token)
}

// TokenAfter is the Next of a page of o's listing whose last entry was last.
func (o ListOptions) TokenAfter(last DelimitedToken) string {
	if o.Delimiter == "" {
		return last.Last
	}
	return last.Encode()
}

// After reports whether name comes after the token: not yet listed.
func (t DelimitedToken) After(name string) bool {
	if name <= t.Last {
		return false
	}
	return !t.IsPrefix || !strings.HasPrefix(name, t.Last)
}
