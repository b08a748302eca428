package azure

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// List returns one page of the blobs whose names start with opts.Prefix,
// in Azure's byte-wise name order, with one List Blobs request: flat, or
// with a delimiter in its hierarchical form, where Azure rolls names up at
// the delimiter itself, so that a listing of shards costs one entry per
// shard however many generations each holds. Max <= 0 means
// DefaultListMax; Azure caps it at MaxListMax and may return fewer entries
// with a token.
//
// A flat listing's token is Azure's opaque marker. A delimited listing's
// is "m" and Azure's NextMarker, or a blob.DelimitedToken a caller built
// to start after a name, sent as startFrom. An emulator that ignores
// startFrom (Azurite 3.35.0) lists from the start instead: what the token
// says was listed is dropped, and the listing goes on with markers until
// it is past the token, so a listing never silently restarts.
//
// Errors: blob.ErrUnavailable (429, 5xx, network failures after retries),
// blob.ErrInvalidName (for the prefix, and a delimited listing's token
// that is not one), blob.ErrClosed; the caller's context error
// unclassified; anything else (a bad marker: 400) unclassified.
func (s *Store) List(ctx context.Context, opts blob.ListOptions) (blob.ListPage, error) {
	if err := blob.ValidatePrefix(opts.Prefix); err != nil {
		return blob.ListPage{}, err
	}
	full, n, err := s.listRequest(opts.Prefix, opts.Max)
	if err != nil {
		return blob.ListPage{}, err
	}
	marker, after, err := parseListToken(opts)
	if err != nil {
		return blob.ListPage{}, err
	}
	req := listReq{prefix: full, delimiter: opts.Delimiter, max: n, marker: marker}
	if after != nil {
		req.startFrom = s.prefix + after.Last
		if s.startFromIgnored.Load() > 0 {
			req.max = MaxListMax // skip in few requests
		}
	}
	for {
		page, next, err := s.listOnce(ctx, opts.Prefix, req)
		if err != nil {
			return blob.ListPage{}, err
		}
		if after != nil {
			dropListed(&page, *after)
		}
		if next != "" {
			page.Next = next
			if opts.Delimiter != "" {
				page.Next = "m" + next
			}
		}
		if len(page.Items)+len(page.Prefixes) > 0 || next == "" || after == nil {
			// Only a request after a built token asks for more than n.
			truncatePage(&page, int(n))
			return page, nil
		}
		// Everything on this page was at or before the token: startFrom
		// was ignored. Go on from the marker, in large pages.
		s.startFromIgnored.Add(1)
		req.startFrom, req.marker, req.max = "", next, MaxListMax
	}
}

// listRequest returns what one List Blobs request for prefix asks for: the
// name prefix with the store's own, and max as a page size Azure serves.
func (s *Store) listRequest(prefix string, max int) (full string, n int32, err error) {
	full = s.prefix + prefix
	if len(full) > blob.MaxNameBytes {
		return "", 0, fmt.Errorf("%w: prefix %q: with the store's prefix %q it is longer than %d bytes",
			blob.ErrInvalidName, prefix, s.prefix, blob.MaxNameBytes)
	}
	switch {
	case max <= 0:
		max = DefaultListMax
	case max > MaxListMax:
		max = MaxListMax
	}
	return full, int32(max), nil
}

// listedAttrs returns the Attrs of a listed blob, and false for an entry
// that is not a blob of this store (outside its prefix).
func (s *Store) listedAttrs(it *container.BlobItem) (blob.Attrs, bool) {
	if it == nil || it.Name == nil || !strings.HasPrefix(*it.Name, s.prefix) {
		return blob.Attrs{}, false
	}
	a := blob.Attrs{
		Name:  strings.TrimPrefix(*it.Name, s.prefix),
		PutID: metaValue(it.Metadata, putIDKey),
	}
	if p := it.Properties; p != nil {
		if p.ContentLength != nil {
			a.Size = *p.ContentLength
		}
		a.ETag = etagOf(p.ETag)
		a.LastModified = timeOf(p.LastModified)
	}
	return a, true
}

// truncatePage keeps a page's first n entries in name order; the token
// then starts after the last one kept.
func truncatePage(page *blob.ListPage, n int) {
	if len(page.Items)+len(page.Prefixes) <= n {
		return
	}
	var last blob.DelimitedToken
	i, j := 0, 0
	for i+j < n {
		if j == len(page.Prefixes) || (i < len(page.Items) && page.Items[i].Name < page.Prefixes[j]) {
			last = blob.DelimitedToken{Last: page.Items[i].Name}
			i++
		} else {
			last = blob.DelimitedToken{Last: page.Prefixes[j], IsPrefix: true}
			j++
		}
	}
	page.Items, page.Prefixes, page.Next = page.Items[:i], page.Prefixes[:j], last.Encode()
}

// parseListToken splits List's token into Azure's marker or, for a
// delimited listing, a position to start after.
func parseListToken(opts blob.ListOptions) (marker string, after *blob.DelimitedToken, err error) {
	if opts.Token == "" {
		return "", nil, nil
	}
	if opts.Delimiter == "" {
		return opts.Token, nil, nil
	}
	if m, ok := strings.CutPrefix(opts.Token, "m"); ok && m != "" {
		return m, nil, nil
	}
	t, err := blob.ParseDelimitedToken(opts.Token)
	if err != nil {
		return "", nil, err
	}
	return "", &t, nil
}

// dropListed drops from page what the token says was listed already.
func dropListed(page *blob.ListPage, after blob.DelimitedToken) {
	page.Items = slices.DeleteFunc(page.Items, func(a blob.Attrs) bool { return !after.After(a.Name) })
	page.Prefixes = slices.DeleteFunc(page.Prefixes, func(p string) bool { return !after.After(p) })
}

// listReq is one List Blobs request.
type listReq struct {
	prefix, delimiter, marker, startFrom string
	max                                  int32
}

// listOnce sends one List Blobs request, flat or, with a delimiter,
// hierarchical, and returns its page and Azure's marker.
func (s *Store) listOnce(ctx context.Context, prefix string, req listReq) (blob.ListPage, string, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return blob.ListPage{}, "", opError("list", prefix, nil, err)
	}
	defer release()
	var (
		items    []*container.BlobItem
		prefixes []*container.BlobPrefix
		next     *string
	)
	include := container.ListBlobsInclude{Metadata: true}
	if req.delimiter == "" {
		lo := &container.ListBlobsFlatOptions{Include: include, MaxResults: &req.max,
			Prefix: optional(req.prefix), Marker: optional(req.marker), StartFrom: optional(req.startFrom)}
		resp, err := s.client.NewListBlobsFlatPager(lo).NextPage(ctx)
		if err != nil {
			return blob.ListPage{}, "", opError("list", prefix, classify(ctx, err, nil, false), err)
		}
		if seg := resp.Segment; seg != nil {
			items = seg.BlobItems
		}
		next = resp.NextMarker
	} else {
		lo := &container.ListBlobsHierarchyOptions{Include: include, MaxResults: &req.max,
			Prefix: optional(req.prefix), Marker: optional(req.marker), StartFrom: optional(req.startFrom)}
		resp, err := s.client.NewListBlobsHierarchyPager(req.delimiter, lo).NextPage(ctx)
		if err != nil {
			return blob.ListPage{}, "", opError("list", prefix, classify(ctx, err, nil, false), err)
		}
		if seg := resp.Segment; seg != nil {
			items, prefixes = seg.BlobItems, seg.BlobPrefixes
		}
		next = resp.NextMarker
	}
	page := s.listedPage(items, prefixes, req.delimiter)
	if next == nil {
		return page, "", nil
	}
	return page, *next, nil
}

// listedPage is the page of a List Blobs answer's entries of this store.
func (s *Store) listedPage(items []*container.BlobItem, prefixes []*container.BlobPrefix, delimiter string) blob.ListPage {
	var page blob.ListPage
	for _, it := range items {
		if a, ok := s.listedAttrs(it); ok {
			page.Items = append(page.Items, a)
		}
	}
	for _, p := range prefixes {
		if p == nil || p.Name == nil || !strings.HasPrefix(*p.Name, s.prefix) {
			continue
		}
		name := strings.TrimPrefix(*p.Name, s.prefix)
		if !strings.HasSuffix(name, delimiter) {
			// Azurite 3.35 cuts a prefix one byte after the start of a
			// delimiter of several bytes; Azure keeps the whole
			// delimiter, which is what the rest of the name is.
			name += delimiter[1:]
		}
		page.Prefixes = append(page.Prefixes, name)
	}
	return page
}

// optional is s, or nil for "": a parameter the request leaves out.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// StartFromIgnored counts the listing requests that found the backend had
// ignored startFrom (Azurite does): each cost one more request.
func (s *Store) StartFromIgnored() uint64 { return s.startFromIgnored.Load() }
