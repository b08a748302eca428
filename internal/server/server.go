// Package server is rolloutd's gRPC front end: the RolloutService handlers,
// the set of resident shard writers they share, the mapping of errors to
// gRPC codes, the interceptors (recovery, default deadline, sampled access
// log), health and reflection, metrics, and the ordered shutdown.
//
// The package does not know which storage backend it runs on: it gets one
// blob.Store, shared by every writer and the reader.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/shard"
	shardfollow "github.com/rolloutd/rolloutd/internal/shard/follow"
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

// Server is a rolloutd gRPC server: RolloutService, grpc.health.v1 and
// reflection on one grpc.Server.
type Server struct {
	cfg     Config
	log     *zap.Logger
	access  *zap.Logger
	errLog  *errorLog // the error lines each client may cause
	metrics *Metrics
	grpc    *grpc.Server
	health  *health.Server
	writers *writerSet

	streams       context.Context // parent of every streaming RPC's context
	cancelStreams context.CancelFunc

	purger     *shard.Purger    // reclaims deleted shards' blobs (lifecycle.go)
	follow     *shardfollow.Set // one reader per shard for following Scans (scan.go)
	guard      *guard           // authorization and the append rate limit
	admission  *admission       // the request memory budget
	healthOnly *grpc.Server     // grpc.health.v1 alone, for ServeHealth
}

// New builds a Server over cfg.Store and registers its metrics with
// cfg.Registerer. It starts nothing; call Serve.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withTracing()
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: NewMetrics(),
		health:  health.NewServer(),
		errLog:  newErrorLog(),
	}
	s.access = cfg.Logger.Named("access").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 10, 100)
	}))
	s.streams, s.cancelStreams = context.WithCancel(context.Background())
	s.guard = newGuard(cfg, s.access)
	s.admission = newAdmission(cfg, s.guard, s.access)
	s.log.Info("request memory budget", zap.Int64("budget_bytes", cfg.RequestBudgetBytes),
		zap.Int64("connection_share_bytes", s.admission.budget.connLimit), zap.Int64("identity_share_bytes", s.admission.budget.identityLimit),
		zap.Int("max_message_bytes", cfg.MaxMessageBytes), zap.Duration("recv_timeout", cfg.RecvTimeout), zap.Duration("send_timeout", cfg.SendTimeout))

	cache := shard.NewBlobCache(cfg.IndexCacheBytes)
	notifier := shard.NewNotifier()
	wopts := cfg.Writer
	wopts.Logger = cfg.Logger
	wopts.Cache = cache
	wopts.Notifier = notifier
	metrics := s.metrics
	wopts.OnMerge = metrics.observeMerge
	wopts.OnFence = metrics.logFences.Inc
	wopts.OnCheckpoint = metrics.checkpoints.Inc
	// The writer set's writers of one shard follow each other in this
	// process: a writer that ended with a create in doubt (evicted, or
	// aborted by a Close that timed out) hands it over through the
	// lineage, with no I/O, and the shard's next writer fences the log.
	if wopts.Lineage == nil {
		wopts.Lineage = shard.NewLineage()
	}
	if wopts.Clock == nil {
		wopts.Clock = cfg.Clock
	}
	open := func(ctx context.Context, shardName string) (*shard.Writer, error) {
		return shard.Open(ctx, cfg.Store, shardName, wopts)
	}
	s.writers = newWriterSet(cfg.MaxWriters, open, cfg.OpenTimeout, appendRetry{cfg.AppendAttempts, cfg.RetryBackoff}, cfg.Logger, s.metrics)
	s.writers.clock = cfg.Clock
	s.writers.tracer = cfg.Writer.Tracer
	svc := &service{
		writers:         s.writers,
		reader:          shard.NewReader(countedStore{cfg.Store}, shard.ReaderOptions{Logger: cfg.Logger, Cache: cache}),
		notifier:        notifier,
		clock:           cfg.Clock,
		metrics:         s.metrics,
		maxBatchRecords: cfg.MaxBatchRecords,
		maxRecordBytes:  cfg.MaxRecordBytes,
	}
	s.admission.storedSize = svc.reader.StoredSize
	// Following Scans share one reader per shard, woken by this
	// instance's commits.
	s.follow = shardfollow.NewSet(svc.reader, shardfollow.Options{Notifier: notifier, Logger: cfg.Logger})
	svc.follow = s.follow
	s.purger = shard.NewPurger(cfg.Store, 2, cfg.Logger)
	svc.life = lifecycle{store: countedStore{cfg.Store}, listLimiter: cfg.ListLimiter, listTotal: cfg.ListTotalLimiter, summaries: make(chan struct{}, summarySlots), errLog: s.errLog, authz: cfg.Authorizer, purger: s.purger, log: cfg.Logger, batchGetBytes: cfg.BatchGetBytes}

	if reg := cfg.Registerer; reg != nil {
		for _, c := range s.metrics.collectors {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("server: register metrics: %w", err)
			}
		}
		gauges := []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "rolloutd_writer_queued_bytes",
				Help: "Bytes of records queued or in flight on this instance's shard writers.",
			}, func() float64 { return float64(s.writers.queuedBytes()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "rolloutd_shard_generations_max",
				Help: "Most live generations of any shard this instance writes; merges keep it near the count trigger, so growth is a merge backlog.",
			}, func() float64 { most, _ := s.writers.generations(); return float64(most) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "rolloutd_shard_generations",
				Help: "Live generations over every shard this instance writes.",
			}, func() float64 { _, total := s.writers.generations(); return float64(total) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "rolloutd_index_cache_bytes",
				Help: "Bytes held by the shared generation footer-index cache.",
			}, func() float64 { return float64(cache.Bytes()) }),
		}
		for _, c := range gauges {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("server: register metrics: %w", err)
			}
		}
		for _, c := range append(append(s.guard.collectors(), s.admission.collectors()...), s.errLog.dropped) {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("server: register metrics: %w", err)
			}
		}
	}

	opts := append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.ChainUnaryInterceptor(s.accessLog, s.recoverUnary, s.guard.unary, s.defaultDeadline),
		// recoverStream is innermost: cancelOnShutdown runs the handler in
		// a goroutine of its own.
		grpc.ChainStreamInterceptor(s.streamLog, s.guard.stream, s.cancelOnShutdown, s.recoverStream),
		// Gives every RPC its request id before the first interceptor,
		// and counts what it sends.
		grpc.StatsHandler(rpcStats{}),
		// Stop waits for handlers to return, so that no append is still
		// using a writer when Shutdown closes the writers.
		grpc.WaitForHandlers(true),
		// Unfiltered scans forward stored records without re-encoding.
		grpc.ForceServerCodecV2(newPassthroughCodec(s.metrics.decodeFailures)),
	}, append(append(cfg.connOptions(), s.admission.options()...), cfg.ServerOptions...)...)
	s.grpc = grpc.NewServer(opts...)
	s.healthOnly = newHealthOnly(cfg, s.health)
	// Every service registers through the admission, which charges its
	// requests to the memory budget before their bodies are read.
	reg := s.admission.registrar(s.grpc)
	rolloutv1.RegisterRolloutServiceServer(reg, svc)
	healthpb.RegisterHealthServer(reg, s.health)
	reflection.Register(reg)
	s.health.SetServingStatus(rolloutv1.RolloutService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.guard.subscribe(cfg.ClientCAs)
	return s, nil
}

// Serve serves gRPC on lis until Shutdown. It returns nil after Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	s.log.Info("serving gRPC", zap.String("addr", lis.Addr().String()))
	// The send timeout closes connections it finds through the listener.
	return s.grpc.Serve(s.admission.conns.listen(lis))
}

// Shutdown stops the server in order, bounded by ctx:
//
//  1. health reports NOT_SERVING;
//  2. it keeps serving for the drain delay, so load balancers stop sending;
//  3. streaming RPCs are cancelled;
//  4. GracefulStop lets in-flight RPCs finish, for up to half of the time
//     left; then Stop cancels the rest and waits for their handlers;
//  5. every resident writer is closed gracefully, committing what is
//     queued, with the time left;
//  6. a writer whose Close does not finish in time is aborted, and logged.
//
// No acknowledged append is lost on any path: an ack is only given once the
// append is durable. Shutdown returns when all of that is done.
func (s *Server) Shutdown(ctx context.Context) {
	start := time.Now()
	s.guard.close()
	s.health.Shutdown()
	s.log.Info("shutdown: health NOT_SERVING", zap.Duration("drain_delay", s.cfg.DrainDelay))
	if d := s.cfg.DrainDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}

	s.cancelStreams()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	var budget <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(dl) / 2)
		defer t.Stop()
		budget = t.C
	}
	select {
	case <-stopped:
	case <-budget:
	case <-ctx.Done():
	}
	select {
	case <-stopped:
		s.log.Info("shutdown: gRPC stopped gracefully")
	default:
		s.log.Warn("shutdown: graceful stop ran out of time; cancelling the RPCs still in flight")
		s.metrics.shutdownTimeouts.WithLabelValues(shutdownStageRPCs).Inc()
		s.grpc.Stop()
		<-stopped
	}
	s.healthOnly.Stop()
	// Every following Scan has ended: stop the shard readers they left.
	s.follow.Close()
	// A purge cut short here is finished by the next DeleteShard of the
	// shard, or rolloutd admin purge.
	s.purger.Close()

	closed, failed := s.writers.closeAll(ctx)
	if failed > 0 && ctx.Err() != nil {
		s.metrics.shutdownTimeouts.WithLabelValues(shutdownStageWriters).Inc()
	}
	s.log.Info("shutdown: writers closed", zap.Int("closed", closed), zap.Int("aborted", failed), zap.Duration("elapsed", time.Since(start)))
}
