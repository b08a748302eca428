package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// opError wraps a failed operation's native error, and its class when it
// has one, so that callers can test both with errors.Is/As:
//
//	azure: put "shards/a/manifest": blob: condition failed: HTTP 412 ConditionNotMet (request 1f2e…)
func opError(op, name string, class, err error) error {
	if class == nil {
		return fmt.Errorf("azure: %s %q: %w", op, name, native(err))
	}
	if err == nil {
		return fmt.Errorf("azure: %s %q: %w", op, name, class)
	}
	return fmt.Errorf("azure: %s %q: %w: %w", op, name, class, native(err))
}

// classify maps the SDK's final error for an operation to a blob error
// class, or nil for an error outside every class. write marks operations
// that change state: once one of their tries may have been applied, any
// failure not resolved by the caller means the outcome is unknown.
func classify(ctx context.Context, err error, st *opState, write bool) error {
	if write && st != nil && st.maybeApplied.Load() {
		return blob.ErrOutcomeUnknown
	}
	if ctx.Err() != nil && isContextErr(err) {
		return nil // the caller's own cancellation or deadline
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusNotModified:
			return blob.ErrNotModified
		case re.StatusCode == http.StatusNotFound && !bloberror.HasCode(err, bloberror.ContainerNotFound):
			return blob.ErrNotFound
		case re.StatusCode == http.StatusPreconditionFailed,
			bloberror.HasCode(err, bloberror.BlobAlreadyExists):
			return blob.ErrConditionFailed
		case re.StatusCode == http.StatusRequestTimeout,
			re.StatusCode == http.StatusTooManyRequests,
			re.StatusCode >= 500:
			return blob.ErrUnavailable
		}
		return nil
	}
	if isTransportErr(err) {
		return blob.ErrUnavailable
	}
	return nil
}

// conditionLost reports whether err says a conditional put lost its
// condition: 409 BlobAlreadyExists (create-only; Azurite), 412
// ConditionNotMet (either kind; real Azure may use it for create-only too),
// or 404 BlobNotFound for an If-Match put on a missing blob.
func conditionLost(err error, ifMatch bool) bool {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	switch {
	case re.StatusCode == http.StatusPreconditionFailed:
		return true
	case re.StatusCode == http.StatusConflict && bloberror.HasCode(err, bloberror.BlobAlreadyExists):
		return true
	case re.StatusCode == http.StatusNotFound && ifMatch && bloberror.HasCode(err, bloberror.BlobNotFound):
		return true
	}
	return false
}

func statusCode(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// isTransportErr reports whether err came from the network rather than
// from the service or the SDK itself.
func isTransportErr(err error) bool {
	var (
		ue *url.Error
		ne net.Error
	)
	return errors.As(err, &ue) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded) // a try's timeout
}

// native wraps an SDK error with a one-line message. The SDK's own
// ResponseError message spans a dozen lines with the whole response body,
// and a url.Error repeats the URL, whose query may hold a SAS signature.
// errors.As still reaches the original.
func native(err error) error {
	if err == nil {
		return nil
	}
	return &sdkError{err: err}
}

type sdkError struct{ err error }

func (e *sdkError) Unwrap() error { return e.err }

func (e *sdkError) Error() string {
	var re *azcore.ResponseError
	if errors.As(e.err, &re) {
		code := re.ErrorCode
		if code == "" {
			code = http.StatusText(re.StatusCode)
		}
		if re.RawResponse != nil {
			if id := re.RawResponse.Header.Get("x-ms-request-id"); id != "" {
				return fmt.Sprintf("HTTP %d %s (request %s)", re.StatusCode, code, id)
			}
		}
		return fmt.Sprintf("HTTP %d %s", re.StatusCode, code)
	}
	var ue *url.Error
	if errors.As(e.err, &ue) {
		return fmt.Sprintf("%s %s: %v", ue.Op, redactURL(ue.URL), ue.Err)
	}
	return e.err.Error()
}

// redactURL drops a URL's query, which may carry a SAS token.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.User = nil
	return u.String()
}
