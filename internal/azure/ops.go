package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	azblobblob "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
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
	uo, id, auto := uploadOptions(opts, conditional)
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

// uploadOptions is the request of one Put: its conditions, and the PutID
// it stores, which Put makes up (auto) for a conditional put without one,
// so that it can still tell its own landed try from another writer's.
func uploadOptions(opts blob.PutOptions, conditional bool) (uo *blockblob.UploadOptions, id string, auto bool) {
	id = opts.PutID
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
	return &blockblob.UploadOptions{
		Metadata:         md,
		HTTPHeaders:      &azblobblob.HTTPHeaders{BlobContentType: strPtr("application/octet-stream")},
		AccessConditions: &azblobblob.AccessConditions{ModifiedAccessConditions: mac},
	}, id, auto
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
