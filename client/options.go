package client

import (
	"time"

	"google.golang.org/grpc"
)

// Option configures New.
type Option func(*config)

type config struct {
	tls            *TLSConfig
	affinity       bool
	attemptTimeout time.Duration
	callTimeout    time.Duration
	retry          RetryPolicy
	maxMessage     int
	dial           []grpc.DialOption
}

func defaultConfig() config {
	return config{attemptTimeout: DefaultAttemptTimeout, callTimeout: DefaultCallTimeout, retry: DefaultRetryPolicy, maxMessage: DefaultMaxMessageBytes}
}

// WithTLS connects over TLS, verifying the server with the CA of
// cfg.CAFile, and presenting a client certificate when cfg names one
// (mTLS). Without it the connection is plaintext, which only a development
// server (no --tls-cert) accepts. See docs/security.md.
func WithTLS(cfg TLSConfig) Option { return func(c *config) { c.tls = &cfg } }

// WithAffinity(true) routes every call for a shard to the same server
// address: gRPC's ring_hash balancing (ServiceConfig) keyed on ShardHeader.
// Use it with a target that resolves to every pod, such as DefaultTarget.
// Off by default: the channel uses gRPC's default pick_first.
func WithAffinity(on bool) Option { return func(c *config) { c.affinity = on } }

// WithAttemptTimeout bounds each attempt of Append and Get (default
// DefaultAttemptTimeout), within the call's own deadline, so that one hung
// attempt cannot use up the call's deadline; an attempt that runs out is
// resent. For Scan it bounds the wait for a connection when resuming.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) { c.attemptTimeout = d }
}

// WithCallTimeout sets the time budget of a unary call whose context has
// no deadline, every attempt and wait included (default
// DefaultCallTimeout), and of a Scan's resumes after one break. A
// context's deadline replaces it.
func WithCallTimeout(d time.Duration) Option {
	return func(c *config) { c.callTimeout = d }
}

// WithRetry sets the retry budget of every call (default
// DefaultRetryPolicy). RetryPolicy{MaxAttempts: 1} turns retries off.
func WithRetry(p RetryPolicy) Option { return func(c *config) { c.retry = p } }

// WithMaxMessageBytes sets the largest message the client sends to n, the
// server's --max-message-bytes (default DefaultMaxMessageBytes, the
// server's default), and the largest it receives to n plus what the server
// adds to a stored record.
func WithMaxMessageBytes(n int) Option { return func(c *config) { c.maxMessage = n } }

// WithDialOptions adds gRPC dial options after the client's own, for
// example a custom resolver or dialer. Options that replace what the
// client sets (credentials, the service config, call options) override
// it.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dial = append(c.dial, opts...) }
}

// AppendOption configures one Append.
type AppendOption func(*appendConfig)

type appendConfig struct{ requestID string }

// WithRequestID sends id as the Append's request_id (1–128 characters of
// [A-Za-z0-9._:-]) instead of a fresh UUIDv4. Use it to make your own
// resends of a call that failed with ErrOutcomeUnknown idempotent: send
// the same records with the same id.
func WithRequestID(id string) AppendOption { return func(a *appendConfig) { a.requestID = id } }
