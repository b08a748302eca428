package azure

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// newTransport builds the process's one HTTP transport, sized for cfg.MaxConns
// concurrent requests. The SDK's shared default keeps only 10 idle
// connections per host, so any concurrency above 10 closes connections after
// use and dials new ones (TIME_WAIT churn; docs/performance.md, target 2).
func newTransport(cfg *Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if cfg.dial != nil {
		dial = cfg.dial
	}
	idle := cfg.MaxConns
	if cfg.idlePerHost > 0 {
		idle = cfg.idlePerHost
	}
	// Blob storage speaks HTTP/1.1 only: one request per connection.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		Protocols:           &protocols,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		// The Store's semaphore bounds requests in flight, not connections:
		// a released slot's connection returns to the idle pool a moment
		// after the slot, so the next request can find the pool empty and
		// dial, and that dial completes even when an idle connection serves
		// the request first. Under slow TLS handshakes these dials piled up
		// to hundreds of connections with MaxConns 64. The per-host cap makes
		// such a request wait for the returning connection instead; the
		// semaphore still does the long waits, under the caller's context.
		MaxConnsPerHost:       cfg.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second, // the SDK sends Expect: 100-continue after throttling
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: cfg.RootCAs},
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// opState records, for one operation, whether any of the SDK's tries may
// have reached the service without a definitive answer coming back: a reset
// or timeout after the request was sent, or a 5xx other than 503. A write
// whose final error follows such a try has an unknown outcome.
type opState struct {
	tries        atomic.Int32
	maybeApplied atomic.Bool
}

type opStateKey struct{}

func withOpState(ctx context.Context) (context.Context, *opState) {
	st := &opState{}
	return context.WithValue(ctx, opStateKey{}, st), st
}

// tryRecorder is a per-try pipeline policy (it runs inside the SDK's retry
// loop, once per try) that fills in the operation's opState and counts the
// try in metrics (nil: not counted).
type tryRecorder struct{ metrics *TryMetrics }

func (r tryRecorder) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	r.metrics.observe(resp, err)
	if st, ok := req.Raw().Context().Value(opStateKey{}).(*opState); ok {
		st.tries.Add(1)
		if tryMaybeApplied(resp, err) {
			st.maybeApplied.Store(true)
		}
	}
	return resp, err
}

// tryMaybeApplied reports whether a try with this outcome may have changed
// the blob without saying so.
func tryMaybeApplied(resp *http.Response, err error) bool {
	if err != nil {
		return !nothingSent(err)
	}
	// 503 (ServerBusy) and 429 reject a request unprocessed. A 500
	// (InternalError, OperationTimedOut) "may or may not have succeeded on
	// the server side"; 502 and 504 come from something in between.
	return resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable
}

// nothingSent reports whether err proves that no byte of the request
// reached the service: the connection was never made.
func nothingSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var (
		certErr   *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		recErr    tls.RecordHeaderError
	)
	return errors.As(err, &certErr) || errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &recErr)
}
