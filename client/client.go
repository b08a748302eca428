package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// DefaultTarget is the headless Service of deploy/k8s, in the namespace the
// base uses, through the DNS resolver (one address per ready pod): the
// target to use with WithAffinity(true) inside the cluster.
const DefaultTarget = "dns:///rolloutd-headless.rolloutd.svc.cluster.local:50051"

// DefaultMaxMessageBytes is rolloutd's default --max-message-bytes, the
// largest request it takes.
const DefaultMaxMessageBytes = 16 << 20

// streamWindow and connWindow are the flow-control windows the client
// grants the server: a stream's response may run 4 MiB ahead of the
// application's reads, all streams together 16 MiB (the most gRPC's
// dynamic estimation would grow to). Static, they are granted from the
// first byte instead of growing from 64 KiB, which cost a WINDOW_UPDATE and
// a PING per response; so a caller that reads its Scans slowly may buffer
// up to 16 MiB per connection (with WithAffinity, one connection per pod)
// from the start. WithDialOptions can set others.
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// responseGrowth is what a response may carry beyond a request's record:
// the id, created_at and seq the server fills in, and the framing of
// GetResponse and ScanResponse (177 bytes; see internal/server's
// DefaultMaxRecordBytes), rounded up.
const responseGrowth = 1 << 10

// Client is a connection to rolloutd. It is safe for concurrent use; make
// one per process and share it.
type Client struct {
	conn   *grpc.ClientConn
	target string
	rpc    rolloutv1.RolloutServiceClient
	cfg    config
	closed atomic.Bool
}

// New creates a client of the rolloutd at target, a gRPC target such as
// "localhost:50051" or DefaultTarget. It does not connect yet: the first
// call does.
func New(target string, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.retry.MaxAttempts < 1:
		return nil, fmt.Errorf("client: RetryPolicy.MaxAttempts %d: want at least 1", cfg.retry.MaxAttempts)
	case cfg.retry.InitialBackoff < 0 || cfg.retry.MaxBackoff < cfg.retry.InitialBackoff:
		return nil, errors.New("client: RetryPolicy: want 0 <= InitialBackoff <= MaxBackoff")
	case cfg.attemptTimeout <= 0:
		return nil, fmt.Errorf("client: attempt timeout %v: want more than 0", cfg.attemptTimeout)
	case cfg.callTimeout <= 0:
		return nil, fmt.Errorf("client: call timeout %v: want more than 0", cfg.callTimeout)
	case cfg.maxMessage <= 0:
		return nil, fmt.Errorf("client: max message bytes %d: want more than 0", cfg.maxMessage)
	}
	creds := insecure.NewCredentials()
	if cfg.tls != nil {
		var err error
		if creds, err = cfg.tls.credentials(); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallSendMsgSize(cfg.maxMessage),
			grpc.MaxCallRecvMsgSize(cfg.maxMessage+responseGrowth),
		),
		// The client owns retries (see the package comment); the
		// channel's own would stack on them.
		grpc.WithDisableRetry(),
		grpc.WithConnectParams(reconnect),
		// Static windows turn off gRPC's bandwidth-delay estimation, which
		// answers nearly every response with a WINDOW_UPDATE and a PING:
		// two frames the server reads, and a PING ack it writes, per call.
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
		// The caller's span, if any, as traceparent (trace.go).
		grpc.WithChainUnaryInterceptor(propagateUnary),
		grpc.WithChainStreamInterceptor(propagateStream),
	}
	if cfg.affinity {
		dial = append(dial, grpc.WithDefaultServiceConfig(ServiceConfig))
	}
	conn, err := grpc.NewClient(target, append(dial, cfg.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{conn: conn, target: target, rpc: rolloutv1.NewRolloutServiceClient(conn), cfg: cfg}, nil
}

// Close closes the connection. Calls in flight fail; later calls return
// ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	return c.conn.Close()
}

// withShard sets ShardHeader, which the ring_hash picker hashes.
func withShard(ctx context.Context, shard string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, ShardHeader, shard)
}

// unary runs one unary call with c's retry budget: attempt runs one
// attempt under its own timeout; kind decides which failures are resent.
// The call's time budget is ctx's deadline, or the call timeout.
func (c *Client) unary(ctx context.Context, kind callKind, attempt func(ctx context.Context) error) error {
	if c.closed.Load() {
		return ErrClosed
	}
	start := time.Now()
	// Without a deadline of ctx's own, the call's is start plus the call
	// timeout, and its context is made only once an attempt has failed:
	// the first attempt, which nearly every call ends with, is bounded by
	// the earlier of the two deadlines, with one timer rather than two.
	_, bounded := ctx.Deadline()
	callDeadline := start.Add(c.cfg.callTimeout)
	p := c.cfg.retry
	// mayHaveLanded: an earlier attempt of this Append (or DeleteShard)
	// may have taken effect. The answer of a later one (NOT_COMMITTED, or
	// a conditional delete's SEQ_MISMATCH) speaks only for that attempt,
	// so the error returned must still say "unknown".
	mayHaveLanded := false
	for n := 1; ; n++ {
		deadline := time.Now().Add(c.cfg.attemptTimeout)
		if !bounded && callDeadline.Before(deadline) {
			deadline = callDeadline
		}
		actx, cancel := context.WithDeadline(ctx, deadline)
		err := attempt(actx)
		cancel()
		if err == nil {
			return nil
		}
		if !bounded {
			var stop context.CancelFunc
			ctx, stop = context.WithDeadline(ctx, callDeadline)
			defer stop()
			bounded = true
		}
		e := newError(err, n)
		if kind.mutates() && e.Reason == "" {
			switch e.Code {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
				e.unknown = true
			}
		}
		if kind.mutates() {
			mayHaveLanded = mayHaveLanded || errors.Is(e, ErrOutcomeUnknown)
			e.unknown = e.unknown || mayHaveLanded
		}
		if ctx.Err() != nil || n >= p.MaxAttempts || !retryable(kind, e) || c.closed.Load() {
			return c.giveUp(e, start)
		}
		if !c.pause(ctx, p.backoff(n, e.RetryDelay, jitter), transportFailure(e)) {
			return c.giveUp(e, start)
		}
	}
}
