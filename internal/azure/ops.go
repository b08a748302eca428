package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Get reads a blob, whole or a byte range (one GET). Attrs describe the
// whole blob. A range at or past the end yields no bytes: Azure answers it
// with 416, and Get then reads the attributes with a HEAD.
//
// Errors: blob.ErrNotFound (404), blob.ErrNotModified (304 with
// IfNoneMatch), blob.ErrUnavailable (429, 5xx, network failures after the
// SDK's retries, a try's timeout, a body cut short), blob.ErrInvalidName,
// blob.ErrClosed; the caller's context error unclassified; anything else
// (403, a deleted container) unclassified.
func (s *Store) Get(ctx context.Context, name string, opts blob.GetOptions) ([]byte, blob.Attrs, error) {
	full, err := s.fullName(name)
	if err != nil {
		return nil, blob.Attrs{}, err
	}
	if opts.Offset < 0 || opts.Length < 0 {
		return nil, blob.Attrs{}, fmt.Errorf("azure: get %q: negative range %d+%d", name, opts.Offset, opts.Length)
	}
	release, err := s.begin(ctx)
	if err != nil {
		return nil, blob.Attrs{}, opError("get", name, nil, err)
	}
	defer release()

	dl := &azblobblob.DownloadStreamOptions{
		Range: azblobblob.HTTPRange{Offset: opts.Offset, Count: opts.Length},
	}
	if opts.IfNoneMatch != "" {
		dl.AccessConditions = &azblobblob.AccessConditions{ModifiedAccessConditions: &azblobblob.ModifiedAccessConditions{
			IfNoneMatch: etagPtr(opts.IfNoneMatch),
		}}
	}
	resp, err := s.client.NewBlobClient(full).DownloadStream(ctx, dl)
	if err != nil {
		if statusCode(err) == http.StatusRequestedRangeNotSatisfiable {
			// Offset at or past the end (or any range of an empty blob).
			a, herr := s.head(ctx, full, opts.IfNoneMatch)
			if herr != nil {
				return nil, blob.Attrs{}, opError("get", name, classify(ctx, herr, nil, false), herr)
			}
			a.Name = name
			return []byte{}, a.public(), nil
		}
		return nil, blob.Attrs{}, opError("get", name, classify(ctx, err, nil, false), err)
	}
	if resp.Body == nil {
		// The SDK turns 304 into a response without a body.
		return nil, blob.Attrs{}, opError("get", name, blob.ErrNotModified,
			fmt.Errorf("HTTP 304: the blob still has ETag %s", opts.IfNoneMatch))
	}
	defer resp.Body.Close()

	var n int64
	if resp.ContentLength != nil {
		n = *resp.ContentLength
	}
	buf := bytes.NewBuffer(make([]byte, 0, n))
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, blob.Attrs{}, opError("get", name, classifyBody(ctx, err), err)
	}
	if int64(buf.Len()) != n {
		return nil, blob.Attrs{}, opError("get", name, blob.ErrUnavailable,
			fmt.Errorf("read %d bytes, the response announced %d", buf.Len(), n))
	}
	size := n
	if resp.ContentRange != nil {
		if total, ok := rangeTotal(*resp.ContentRange); ok {
			size = total
		}
	}
	a := attrs{
		Attrs: blob.Attrs{
			Name:         name,
			Size:         size,
			ETag:         etagOf(resp.ETag),
			PutID:        metaValue(resp.Metadata, putIDKey),
			LastModified: timeOf(resp.LastModified),
		},
	}
	return buf.Bytes(), a.public(), nil
}

// classifyBody classifies a failure while reading a response body.
func classifyBody(ctx context.Context, err error) error {
	if ctx.Err() != nil && isContextErr(err) {
		return nil
	}
	return blob.ErrUnavailable
}

// Head reads a blob's attributes (one HEAD).
//
// Errors: blob.ErrNotFound (404), blob.ErrUnavailable (429, 5xx, network
// failures after retries), blob.ErrInvalidName, blob.ErrClosed; the
// caller's context error unclassified; anything else unclassified.
func (s *Store) Head(ctx context.Context, name string) (blob.Attrs, error) {
	full, err := s.fullName(name)
	if err != nil {
		return blob.Attrs{}, err
	}
	release, err := s.begin(ctx)
	if err != nil {
		return blob.Attrs{}, opError("head", name, nil, err)
	}
	defer release()
	a, err := s.head(ctx, full, "")
	if err != nil {
		return blob.Attrs{}, opError("head", name, classify(ctx, err, nil, false), err)
	}
	a.Name = name
	return a.public(), nil
}

// attrs are a blob's attributes plus the put id the Store generated, if any.
type attrs struct {
	blob.Attrs
	autoPutID string
}

func (a attrs) public() blob.Attrs { return a.Attrs }

// head reads the attributes of the blob stored under full (Name unset).
func (s *Store) head(ctx context.Context, full string, ifNoneMatch blob.ETag) (attrs, error) {
	var o *azblobblob.GetPropertiesOptions
	if ifNoneMatch != "" {
		o = &azblobblob.GetPropertiesOptions{AccessConditions: &azblobblob.AccessConditions{
			ModifiedAccessConditions: &azblobblob.ModifiedAccessConditions{IfNoneMatch: etagPtr(ifNoneMatch)},
		}}
	}
	p, err := s.client.NewBlobClient(full).GetProperties(ctx, o)
	if err != nil {
		return attrs{}, err
	}
	var size int64
	if p.ContentLength != nil {
		size = *p.ContentLength
	}
	return attrs{
		Attrs: blob.Attrs{
			Size:         size,
			ETag:         etagOf(p.ETag),
			PutID:        metaValue(p.Metadata, putIDKey),
			LastModified: timeOf(p.LastModified),
		},
		autoPutID: metaValue(p.Metadata, autoPutIDKey),
	}, nil
}

// Put writes a whole blob with one Put Blob request (a single-shot block
// blob upload; Azure allows up to 5000 MiB in one request).
//
// IfNoneMatch sends If-None-Match: * and IfMatch sends If-Match. A
// conditional put always stores an idempotency key in the blob's metadata:
// opts.PutID, or a random one when that is empty (Head then reports ""). If
// the condition fails, Put may HEAD the blob: when it holds this put's key,
// an earlier try of this put (an SDK retry after a lost response), or an
// earlier call with the same PutID, landed, and Put reports success with
// that version's attributes.
//
// Errors:
//   - blob.ErrConditionFailed: 409 BlobAlreadyExists or 412 ConditionNotMet,
//     or 404 for IfMatch on a missing blob, when no try of this call can
//     have landed and the blob does not carry this put's key.
//   - blob.ErrOutcomeUnknown: a try may have landed (a reset or a timeout
//     after sending, a 500) and neither success nor a clean failure could be
//     established: the final error is not a lost condition, or the blob
//     carries another put's key (ours may have landed and been overwritten),
//     or the HEAD that would tell failed. Re-read to decide.
//   - blob.ErrUnavailable: 429, 503 or network failures where no try can
//     have been applied (nothing was sent, or the service refused it).
//   - blob.ErrInvalidName, blob.ErrClosed; the caller's context error
//     unclassified when nothing can have been applied (and wrapped in
//     blob.ErrOutcomeUnknown otherwise); anything else unclassified.
func (s *Store) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	full, err := s.fullName(name)
	if err != nil {
		return blob.Attrs{}, err
	}
	release, err := s.begin(ctx)
	if err != nil {
		return blob.Attrs{}, opError("put", name, nil, err)
	}
	defer release()

	conditional := opts.IfNoneMatch || opts.IfMatch != ""
	id, auto := opts.PutID, false
	md := map[string]*string{}
	switch {
	case id != "":
		md[putIDKey] = metaEncode(id)
	case conditional:
		id, auto = newPutID(), true
		md[autoPutIDKey] = metaEncode(id)
	}
	mac := &azblobblob.ModifiedAccessConditions{}
	if opts.IfNoneMatch {
		mac.IfNoneMatch = etagPtr(blob.ETag(azcore.ETagAny))
	}
	if opts.IfMatch != "" {
		mac.IfMatch = etagPtr(opts.IfMatch)
	}
	uo := &blockblob.UploadOptions{
		Metadata:         md,
		HTTPHeaders:      &azblobblob.HTTPHeaders{BlobContentType: strPtr("application/octet-stream")},
		AccessConditions: &azblobblob.AccessConditions{ModifiedAccessConditions: mac},
	}

	octx, st := withOpState(ctx)
	resp, err := s.client.NewBlockBlobClient(full).Upload(octx, streaming.NopCloser(bytes.NewReader(data)), uo)
	if err == nil {
		return blob.Attrs{
			Name:         name,
			Size:         int64(len(data)),
			ETag:         etagOf(resp.ETag),
			PutID:        opts.PutID,
			LastModified: timeOf(resp.LastModified),
		}, nil
	}

	lost := conditional && conditionLost(err, opts.IfMatch != "")
	maybe := st.maybeApplied.Load()
	if !maybe {
		switch {
		case !lost:
			return blob.Attrs{}, opError("put", name, classify(ctx, err, st, true), err)
		case auto:
			// No try of this call landed, and no other call knows its key.
			return blob.Attrs{}, opError("put", name, blob.ErrConditionFailed, err)
		}
		// An earlier call with the same PutID may have landed: look.
	} else if id == "" {
		// An unconditional put without a key, which may have landed.
		return blob.Attrs{}, opError("put", name, blob.ErrOutcomeUnknown, err)
	}

	// Did this put land on an earlier try (or in an earlier call)?
	h, herr := s.head(ctx, full, "")
	if herr == nil && h.hasPutID(id, auto) {
		s.log.Info("an earlier attempt of this put landed; its response was lost",
			zap.String("blob", full), zap.Int32("tries", st.tries.Load()), zap.NamedError("last_error", native(err)))
		return blob.Attrs{
			Name:         name,
			Size:         h.Size,
			ETag:         h.ETag,
			PutID:        opts.PutID,
			LastModified: h.LastModified,
		}, nil
	}
	switch {
	case herr != nil && !errors.Is(classify(ctx, herr, nil, false), blob.ErrNotFound):
		return blob.Attrs{}, opError("put", name, blob.ErrOutcomeUnknown,
			fmt.Errorf("%w; reading the blob back to resolve it failed: %w", native(err), native(herr)))
	case maybe:
		// Another version (or none) is there now, but ours may have landed
		// in between and been replaced, or may still land.
		return blob.Attrs{}, opError("put", name, blob.ErrOutcomeUnknown, err)
	default:
		return blob.Attrs{}, opError("put", name, blob.ErrConditionFailed, err)
	}
}

func (a attrs) hasPutID(id string, auto bool) bool {
	if auto {
		return a.autoPutID == id
	}
	return a.PutID == id
}

// Delete removes a blob (one DELETE), only the version with opts.IfMatch
// when that is set.
//
// Errors: blob.ErrNotFound (404; also when an earlier try of this delete
// landed and its response was lost: the blob is gone either way),
// blob.ErrConditionFailed (412 with IfMatch), blob.ErrOutcomeUnknown (a try
// may have been applied and the final answer does not settle it),
// blob.ErrUnavailable (nothing was applied: 429, 503, no connection),
// blob.ErrInvalidName, blob.ErrClosed; the caller's context error
// unclassified; anything else unclassified.
func (s *Store) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	full, err := s.fullName(name)
	if err != nil {
		return err
	}
	release, err := s.begin(ctx)
	if err != nil {
		return opError("delete", name, nil, err)
	}
	defer release()
	var o *azblobblob.DeleteOptions
	if opts.IfMatch != "" {
		o = &azblobblob.DeleteOptions{AccessConditions: &azblobblob.AccessConditions{
			ModifiedAccessConditions: &azblobblob.ModifiedAccessConditions{IfMatch: etagPtr(opts.IfMatch)},
		}}
	}
	octx, st := withOpState(ctx)
	_, err = s.client.NewBlobClient(full).Delete(octx, o)
	if err == nil {
		return nil
	}
	if statusCode(err) == http.StatusNotFound && !isContainerNotFound(err) {
		return opError("delete", name, blob.ErrNotFound, err)
	}
	return opError("delete", name, classify(ctx, err, st, true), err)
}

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

func isContainerNotFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.ErrorCode == "ContainerNotFound"
}

func newPutID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// etagOf returns an ETag in the quoted form of the ETag header. List
// results carry it unquoted, headers quoted; a caller compares ETags for
// equality, so every method must return the same spelling.
func etagOf(e *azcore.ETag) blob.ETag {
	if e == nil || *e == "" {
		return ""
	}
	s := string(*e)
	if !strings.HasPrefix(s, `"`) && !strings.HasPrefix(s, `W/"`) {
		s = `"` + s + `"`
	}
	return blob.ETag(s)
}

func etagPtr(e blob.ETag) *azcore.ETag {
	t := azcore.ETag(e)
	return &t
}

func strPtr(s string) *string { return &s }

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// rangeTotal parses the total size from a Content-Range of "bytes a-b/total".
func rangeTotal(cr string) (int64, bool) {
	i := strings.LastIndexByte(cr, '/')
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(cr[i+1:]), 10, 64)
	return n, err == nil
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
