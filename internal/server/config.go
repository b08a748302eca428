package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/subscribe"
)

// Config configures a Server. Zero values take the defaults below.
type Config struct {
	// Store is the one blob store shared by every writer and the reader.
	// Required.
	Store blob.Store
	// Logger receives lifecycle events and the sampled access log; nil
	// means no logging.
	Logger *zap.Logger
	// Registerer receives the server's metrics; nil means they are not
	// registered.
	Registerer prometheus.Registerer
	// Clock stamps created_at and times the retries of an Append; nil means
	// the wall clock.
	Clock clock.Clock

	// MaxWriters bounds the resident shard writers (the LRU's size).
	// Default 1024.
	MaxWriters int
	// Writer configures every shard writer. The server replaces its Logger,
	// Cache, Notifier and OnMerge with its own, and its Clock, when nil, with
	// Clock. MaxGenerationBytes defaults to fit the largest message.
	Writer shard.Options
	// IndexCacheBytes bounds the footer-index cache shared by every writer
	// and the reader. Default 64 MiB.
	IndexCacheBytes int64
	// PresenceBudgetBytes bounds the memory every writer together spends
	// answering "is this id present?" from memory (shard.PresenceBudget).
	// Default 64 MiB.
	PresenceBudgetBytes int64
	// OpenTimeout bounds opening one writer (claiming its epoch). Default
	// 30 s.
	OpenTimeout time.Duration

	// BatchGetBytes caps the bytes of one BatchGet response, records and
	// their framing; the records past it are marked over the limit, for the
	// client to ask again. The first record found is returned whatever its
	// size. Default DefaultBatchGetBytes, under a client's default 4 MiB
	// receive limit.
	BatchGetBytes int
	// MaxMessageBytes is the largest request the server receives. Default
	// 16 MiB (see docs/operations.md, "Memory").
	MaxMessageBytes int
	// MaxBatchRecords bounds the records of one Append. Default 10000.
	MaxBatchRecords int
	// MaxRecordBytes bounds one encoded record. Default
	// DefaultMaxRecordBytes, the largest record a default gRPC client can
	// read back.
	MaxRecordBytes int
	// DefaultDeadline applies to RPCs that carry none. Default 30 s;
	// negative means none.
	DefaultDeadline time.Duration
	// AppendAttempts bounds the tries of one Append on writers that were
	// fenced (or closed) under it, first try included. Default 4.
	AppendAttempts int
	// RetryBackoff is the base of the jittered delay between those tries;
	// it doubles per try. Default 10 ms.
	RetryBackoff time.Duration
	// DrainDelay is how long Shutdown keeps serving after reporting
	// NOT_SERVING, so that load balancers stop sending. Default 0.
	DrainDelay time.Duration
	// ServerOptions are added to the gRPC server's options (TLS, …).
	ServerOptions []grpc.ServerOption
	// TracerProvider, when set, traces every RPC but health checks
	// (tracing.go): a server span continuing the caller's traceparent, the
	// shard writers' queue-wait, commit and checkpoint spans, and a span
	// per storage call. Nil means no tracing: no handler, no work per call.
	TracerProvider trace.TracerProvider

	// Subscriptions (subscribe.go).

	// SubscribeWatchInterval is how often each prefix that subscriptions
	// read is listed, to find new shards and wake idle ones. Default 5 s.
	SubscribeWatchInterval time.Duration
	// SubscribeIdleAfter parks the shared reader of a subscribed shard
	// idle that long: it stops polling until a local commit or the
	// prefix's listing wakes it. Default 30 s.
	SubscribeIdleAfter time.Duration
	// ConsumerPositions loads a named consumer's stored positions for
	// Subscribe; nil loads them from the consumers stored in Store (the
	// consumer RPCs').
	ConsumerPositions subscribe.ConsumerPositions

	// Security and connection limits (guard.go, connlimits.go).

	// Authorizer decides which client identity may do which verb on which
	// shards; nil admits every client that got through the transport (with
	// mTLS, every client with a certificate from the client CA).
	Authorizer *authz.Authorizer
	// ClientCAs, under mutual TLS, is the client CA bundle in force
	// (*tlsreload.Reloader). After each reload the server re-verifies the
	// client chain of every open stream against it and ends the streams
	// whose client it no longer trusts; a new call on a connection whose
	// client it no longer trusts is refused. nil: a connection's handshake
	// is the only check of its client certificate.
	ClientCAs ClientCAs
	// AppendLimiter bounds the bytes each client identity appends per
	// second; nil means no limit.
	AppendLimiter *ratelimit.Limiter
	// ListLimiter (ratelimit.NewCost) charges each client the store
	// operations its ListShards calls cause, summaries included, and
	// refuses its calls while it is in debt; nil means no limit.
	ListLimiter *ratelimit.Limiter
	// ListTotalLimiter is ListLimiter for all clients together, so that
	// many clients listing at once cannot crowd out appends and gets.
	ListTotalLimiter *ratelimit.Limiter
	// MaxConcurrentStreams bounds the RPCs in flight on one connection.
	// Default 1024.
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is the shortest ping interval allowed to clients;
	// a client that pings more often is disconnected. Default 10 s.
	KeepaliveMinTime time.Duration
	// KeepalivePermitWithoutStream allows client pings (no more often than
	// KeepaliveMinTime) on a connection with no RPC in flight.
	KeepalivePermitWithoutStream bool
	// MaxConnectionAge is about how long a connection lives before the
	// server asks its client to reconnect (GOAWAY), so that load spreads
	// over new instances. Default 10 min; negative means forever.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long RPCs in flight get to finish after
	// that. Default 1 min.
	MaxConnectionAgeGrace time.Duration

	// Memory (budget.go, admission.go).

	// RequestBudgetBytes bounds the bytes that requests in flight may hold:
	// each is charged twice MaxMessageBytes from just before its message is
	// read until it is decoded, then what it costs decoded, until it ends. One
	// connection may hold a quarter of it, one client identity half. A
	// request that does not fit is refused RESOURCE_EXHAUSTED
	// (BACKPRESSURE). Default: DefaultRequestBudget, from the memory limit.
	RequestBudgetBytes int64
	// RecvTimeout bounds how long a request's message may take to arrive
	// after its headers; a stream past it is cancelled. Default
	// DefaultRecvTimeout.
	RecvTimeout time.Duration
	// SendTimeout bounds how long a response may wait, built, for its
	// client to take it; past it the server closes the connection (every
	// stream on it ends), which frees the response. Default
	// DefaultSendTimeout.
	SendTimeout time.Duration
}

// Defaults.
const (
	DefaultMaxWriters      = 1024
	DefaultIndexCacheBytes = 64 << 20
	DefaultOpenTimeout     = 30 * time.Second
	DefaultMaxMessageBytes = 16 << 20
	DefaultMaxBatchRecords = 10000
	DefaultDeadline        = 30 * time.Second
	DefaultAppendAttempts  = 4
	DefaultRetryBackoff    = 10 * time.Millisecond
	DefaultBatchGetBytes   = 3 << 20
)

// DefaultPresenceBudgetBytes holds the presence state of about 30 writers
// at their caps (8,192 ids, about 1.7 MiB with 18-byte ids, and 64 KiB of
// filters), and of all 1,024 resident writers at what 100 busy shards
// held in BenchmarkAppendMemstore100Shards (7-8 KiB each).
const DefaultPresenceBudgetBytes = 64 << 20

// DefaultMaxRecordBytes is the largest record (its encoding as the client
// sent it) that a gRPC client with default settings can read back. grpc-go,
// grpcio (Python) and grpc-js (Node.js) refuse a received message over
// 4 MiB unless the client raises its limit (grpc-go: the call option
// grpc.MaxCallRecvMsgSize; grpcio and grpc-js: the channel option
// "grpc.max_receive_message_length"). The response that carries a record adds what the server stores beside it
// and the response's own framing:
//
//	  4,194,304  4 MiB, a default client's receive limit
//	-       131  id, when the server fills it: tag 1 + length 2 + at most
//	             128 characters (a filled id is 36 today; 128 is the id limit)
//	-        19  created_at, when the server fills it: tag 1 + length 1 +
//	             a Timestamp of at most 17 (seconds 1+10, nanos 1+5)
//	-        11  seq: tag 1 + a varint of at most 10
//	-         5  the record in GetResponse or ScanResponse: tag 1 + length 4
//	             (a length below 256 MiB)
//	-        11  ScanResponse's cursor: tag 1 + a varint of at most 10
//	= 4,194,127
//
// A Scan batch holds a record this large alone: batches are at most 1 MiB
// unless a single record is larger (shard.ScanOptions.BatchBytes).
//
// Servers that take larger records need clients that raise their receive
// limit to match (see README, "Records larger than 4 MiB").
const DefaultMaxRecordBytes = defaultClientRecvBytes - storedRecordGrowth - responseFraming

const (
	// defaultClientRecvBytes is the receive limit of a default gRPC client.
	defaultClientRecvBytes = 4 << 20
	// storedRecordGrowth bounds what the server adds to a record it
	// accepts: an id, created_at and seq (see DefaultMaxRecordBytes).
	storedRecordGrowth = (1 + 2 + 128) + (1 + 1 + 17) + (1 + 10)
	// responseFraming bounds what a GetResponse or a ScanResponse holding
	// one record adds to the record (see DefaultMaxRecordBytes).
	responseFraming = (1 + 4) + (1 + 10)
)

// recordOverhead bounds what shard.Prepare adds to a record beyond the
// client's encoding (an id and created_at), plus the writer's per-entry
// accounting; it sizes the default generation limit.
const recordOverhead = 256

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.MaxWriters == 0 {
		c.MaxWriters = DefaultMaxWriters
	}
	if c.IndexCacheBytes == 0 {
		c.IndexCacheBytes = DefaultIndexCacheBytes
	}
	if c.PresenceBudgetBytes == 0 {
		c.PresenceBudgetBytes = DefaultPresenceBudgetBytes
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.BatchGetBytes == 0 {
		c.BatchGetBytes = DefaultBatchGetBytes
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if c.DefaultDeadline == 0 {
		c.DefaultDeadline = DefaultDeadline
	}
	if c.AppendAttempts == 0 {
		c.AppendAttempts = DefaultAppendAttempts
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.RequestBudgetBytes == 0 {
		c.RequestBudgetBytes, _ = DefaultRequestBudget()
	}
	if c.RecvTimeout == 0 {
		c.RecvTimeout = DefaultRecvTimeout
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.Writer.MaxGenerationBytes == 0 {
		// A batch that the server accepts must fit one generation.
		c.Writer.MaxGenerationBytes = int64(c.MaxMessageBytes) + int64(c.MaxBatchRecords)*recordOverhead
	}
	return c.withConnDefaults()
}

func (c Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("server: Config.Store is required")
	case c.MaxWriters < 1:
		return fmt.Errorf("server: MaxWriters must be at least 1, got %d", c.MaxWriters)
	case c.IndexCacheBytes < 0:
		return fmt.Errorf("server: IndexCacheBytes must not be negative, got %d", c.IndexCacheBytes)
	case c.PresenceBudgetBytes < 0:
		return fmt.Errorf("server: PresenceBudgetBytes must not be negative, got %d", c.PresenceBudgetBytes)
	case c.MaxMessageBytes < 1, c.MaxBatchRecords < 1, c.MaxRecordBytes < 1:
		return fmt.Errorf("server: message, batch and record limits must be positive, got %d, %d, %d", c.MaxMessageBytes, c.MaxBatchRecords, c.MaxRecordBytes)
	case c.MaxRecordBytes > c.MaxMessageBytes:
		return fmt.Errorf("server: MaxRecordBytes (%d) exceeds MaxMessageBytes (%d)", c.MaxRecordBytes, c.MaxMessageBytes)
	case c.AppendAttempts < 1:
		return fmt.Errorf("server: AppendAttempts must be at least 1, got %d", c.AppendAttempts)
	case c.DrainDelay < 0, c.OpenTimeout < 0, c.RetryBackoff < 0:
		return errors.New("server: durations must not be negative")
	case c.RecvTimeout < 0:
		return fmt.Errorf("server: RecvTimeout must be positive, got %s", c.RecvTimeout)
	case c.SendTimeout < 0:
		return fmt.Errorf("server: SendTimeout must be positive, got %s", c.SendTimeout)
	}
	if err := c.validateBudget(); err != nil {
		return err
	}
	return c.validateConn()
}
