package azure

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// List returns one page of the blobs whose names start with prefix (one
// List Blobs request), in Azure's byte-wise name order. token is the Next of
// the previous page (Azure's opaque marker). max <= 0 means DefaultListMax;
// Azure caps it at MaxListMax and may return fewer items with a token.
//
// Errors: blob.ErrUnavailable (429, 5xx, network failures after retries),
// blob.ErrInvalidName (for the prefix), blob.ErrClosed; the caller's context
// error unclassified; anything else (a bad token: 400) unclassified.
func (s *Store) List(ctx context.Context, prefix, token string, max int) (blob.ListPage, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return blob.ListPage{}, err
	}
	full, n, err := s.listRequest(prefix, max)
	if err != nil {
		return blob.ListPage{}, err
	}
	release, err := s.begin(ctx)
	if err != nil {
		return blob.ListPage{}, opError("list", prefix, nil, err)
	}
	defer release()

	lo := &container.ListBlobsFlatOptions{
		Include:    container.ListBlobsInclude{Metadata: true},
		MaxResults: &n,
	}
	if full != "" {
		lo.Prefix = &full
	}
	if token != "" {
		lo.Marker = &token
	}
	resp, err := s.client.NewListBlobsFlatPager(lo).NextPage(ctx)
	if err != nil {
		return blob.ListPage{}, opError("list", prefix, classify(ctx, err, nil, false), err)
	}
	var page blob.ListPage
	if resp.Segment != nil {
		page.Items = make([]blob.Attrs, 0, len(resp.Segment.BlobItems))
		for _, it := range resp.Segment.BlobItems {
			if a, ok := s.listedAttrs(it); ok {
				page.Items = append(page.Items, a)
			}
		}
	}
	if resp.NextMarker != nil {
		page.Next = *resp.NextMarker
	}
	return page, nil
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

// ListDelimited implements blob.Store with List Blobs requests in their
// hierarchical form: Azure rolls names up at the delimiter itself, so a
// listing of shards costs one entry per shard however many generations
// each holds. Its tokens are "m" and Azure's NextMarker, or a
// blob.DelimitedToken a caller built to start after a name, sent as
// startFrom. An emulator that ignores startFrom (Azurite 3.35.0) lists
// from the start instead: what the token says was listed is dropped, and
// the listing goes on with markers until it is past the token, so a
// listing never silently restarts.
func (s *Store) ListDelimited(ctx context.Context, prefix, delimiter, token string, max int) (blob.DelimitedPage, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return blob.DelimitedPage{}, err
	}
	if err := blob.ValidateDelimiter(delimiter); err != nil {
		return blob.DelimitedPage{}, err
	}
	full, n, err := s.listRequest(prefix, max)
	if err != nil {
		return blob.DelimitedPage{}, err
	}
	bigPage := int32(MaxListMax)
	marker, after, err := parseDelimitedToken(token)
	if err != nil {
		return blob.DelimitedPage{}, err
	}
	lo := &container.ListBlobsHierarchyOptions{
		Include:    container.ListBlobsInclude{Metadata: true},
		MaxResults: &n,
	}
	if full != "" {
		lo.Prefix = &full
	}
	switch {
	case marker != "":
		lo.Marker = &marker
	case after != nil:
		from := s.prefix + after.Last
		lo.StartFrom = &from
		if s.startFromIgnored.Load() > 0 {
			lo.MaxResults = &bigPage // skip in few requests
		}
	}
	for {
		page, next, err := s.listHierarchy(ctx, prefix, delimiter, lo)
		if err != nil {
			return blob.DelimitedPage{}, err
		}
		if after != nil {
			dropListed(&page, *after)
		}
		if next != "" {
			page.Next = "m" + next
		}
		if len(page.Items)+len(page.Prefixes) > 0 || next == "" || after == nil {
			truncatePage(&page, int(n))
			return page, nil
		}
		// Everything on this page was at or before the token: startFrom
		// was ignored. Go on from the marker, in large pages.
		s.startFromIgnored.Add(1)
		lo.StartFrom, lo.Marker = nil, &next
		lo.MaxResults = &bigPage
	}
}

// truncatePage keeps a page's first n entries in name order; the token
// then starts after the last one kept.
func truncatePage(page *blob.DelimitedPage, n int) {
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

// parseDelimitedToken splits ListDelimited's token into Azure's marker or
// a position to start after.
func parseDelimitedToken(token string) (marker string, after *blob.DelimitedToken, err error) {
	if token == "" {
		return "", nil, nil
	}
	if m, ok := strings.CutPrefix(token, "m"); ok && m != "" {
		return m, nil, nil
	}
	t, err := blob.ParseDelimitedToken(token)
	if err != nil {
		return "", nil, err
	}
	return "", &t, nil
}

// dropListed drops from page what the token says was listed already.
func dropListed(page *blob.DelimitedPage, after blob.DelimitedToken) {
	page.Items = slices.DeleteFunc(page.Items, func(a blob.Attrs) bool { return !after.After(a.Name) })
	page.Prefixes = slices.DeleteFunc(page.Prefixes, func(p string) bool { return !after.After(p) })
}

// listHierarchy sends one List Blobs request.
func (s *Store) listHierarchy(ctx context.Context, prefix, delimiter string, lo *container.ListBlobsHierarchyOptions) (blob.DelimitedPage, string, error) {
	release, err := s.begin(ctx)
	if err != nil {
		return blob.DelimitedPage{}, "", opError("list", prefix, nil, err)
	}
	defer release()
	resp, err := s.client.NewListBlobsHierarchyPager(delimiter, lo).NextPage(ctx)
	if err != nil {
		return blob.DelimitedPage{}, "", opError("list", prefix, classify(ctx, err, nil, false), err)
	}
	var page blob.DelimitedPage
	if seg := resp.Segment; seg != nil {
		for _, it := range seg.BlobItems {
			if a, ok := s.listedAttrs(it); ok {
				page.Items = append(page.Items, a)
			}
		}
		for _, p := range seg.BlobPrefixes {
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
	}
	next := ""
	if resp.NextMarker != nil {
		next = *resp.NextMarker
	}
	return page, next, nil
}

// StartFromIgnored counts the listing requests that found the backend had
// ignored startFrom (Azurite does): each cost one more request.
func (s *Store) StartFromIgnored() uint64 { return s.startFromIgnored.Load() }
