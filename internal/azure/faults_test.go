package azure

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
)

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// faultHook builds a Config.WrapTransport that routes every request through
// fn, which may forward it to the real transport (next) or not.
func faultHook(fn func(next http.RoundTripper, req *http.Request) (*http.Response, error)) func(http.RoundTripper) http.RoundTripper {
	return func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) { return fn(next, r) })
	}
}

// resetErr is what a connection reset after sending looks like.
func resetErr() error {
	return &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// dialErr is what a refused connection looks like: nothing was sent.
func dialErr() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// fakeResponse is a service error response that never reached Azurite.
func fakeResponse(req *http.Request, status int, code string) *http.Response {
	closeBody(req)
	h := http.Header{}
	h.Set("x-ms-error-code", code)
	h.Set("x-ms-request-id", "fake")
	return &http.Response{
		StatusCode: status,
		Status:     fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  h,
		Body:    io.NopCloser(strings.NewReader("")),
		Request: req,
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// isBlobPut reports a Put Blob request (not a container create).
func isBlobPut(r *http.Request) bool {
	q := r.URL.Query()
	return r.Method == http.MethodPut && !q.Has("restype") && !q.Has("comp")
}

// isContainerReq reports a container create or properties request (not a
// listing).
func isContainerReq(r *http.Request) bool {
	q := r.URL.Query()
	return q.Get("restype") == "container" && !q.Has("comp")
}

// wireLog records what went over the wire, as "PUT 201", "HEAD 200",
// "PUT error". Container create/properties requests are left out.
type wireLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *wireLog) add(req *http.Request, resp *http.Response, err error) {
	if isContainerReq(req) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.entries = append(l.entries, req.Method+" error")
		return
	}
	l.entries = append(l.entries, fmt.Sprintf("%s %d", req.Method, resp.StatusCode))
}

func (l *wireLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.entries, ", ")
}

func (l *wireLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = nil
}
