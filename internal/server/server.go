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
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/consumer"
	"github.com/rolloutd/rolloutd/internal/shard"
	shardfollow "github.com/rolloutd/rolloutd/internal/shard/follow"
	"github.com/rolloutd/rolloutd/internal/shard/subscribe"
)

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

	purger     *shard.Purger     // reclaims deleted shards' blobs (lifecycle.go)
	follow     *shardfollow.Set  // one reader per shard for following Scans (scan.go)
	subscribe  *subscribe.Engine // prefix subscriptions (subscribe.go)
	guard      *guard            // authorization and the append rate limit
	admission  *admission        // the request memory budget
	healthOnly *grpc.Server      // grpc.health.v1 alone, for ServeHealth
	accessAll  *zap.Logger       // the access log unsampled, for lines that carry dropped counts (checkRPCLine)
}

// New builds a Server over cfg.Store and registers its metrics with
// cfg.Registerer. It starts nothing but the gRPC server's idle stream
// workers, which Shutdown ends; call Serve.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withTracing()
	if cfg.Writer.Presence == nil {
		// One budget for every writer of the process, as one cache.
		cfg.Writer.Presence = shard.NewPresenceBudget(cfg.PresenceBudgetBytes)
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: NewMetrics(),
		health:  health.NewServer(),
		errLog:  newErrorLog(),
	}
	s.accessAll = cfg.Logger.Named("access")
	s.access = s.accessAll.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, time.Second, 10, 100)
	}))
	s.streams, s.cancelStreams = context.WithCancel(context.Background())
	s.guard = newGuard(cfg, s.access)
	s.admission = newAdmission(cfg, s.guard, s.access)
	s.log.Info("request memory budget", zap.Int64("budget_bytes", cfg.RequestBudgetBytes),
		zap.Int64("connection_share_bytes", s.admission.budget.connLimit), zap.Int64("identity_share_bytes", s.admission.budget.identityLimit),
		zap.Int("max_message_bytes", cfg.MaxMessageBytes), zap.Duration("recv_timeout", cfg.RecvTimeout), zap.Duration("send_timeout", cfg.SendTimeout))

	cache := shard.NewBlobCache(cfg.IndexCacheBytes)
	svc := s.newService(cache)
	if reg := cfg.Registerer; reg != nil {
		if err := s.registerMetrics(reg, cache); err != nil {
			return nil, err
		}
	}

	s.grpc = grpc.NewServer(s.grpcOptions()...)
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

// newService builds the writer set, the reader, the following Scans' set
// and the purger over cache, and the RolloutService handlers that use them.
func (s *Server) newService(cache *shard.BlobCache) *service {
	cfg := s.cfg
	notifier := shard.NewNotifier()
	wopts := s.writerOptions(cache, notifier)
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
	// Subscriptions have a reader set of their own, whose idle readers
	// park, and one watcher per prefix. They share the consumers' store:
	// subscriptions start from the consumers' stored positions, and
	// their shared readers know the shards' tails that the consumers' lag
	// is computed from.
	cons := consumer.New(countedStore{cfg.Store}, consumer.Options{Clock: cfg.Clock, Logger: cfg.Logger})
	positions := cfg.ConsumerPositions
	if positions == nil {
		positions = consumerPositions(cons)
	}
	s.subscribe = subscribe.New(countedStore{cfg.Store}, svc.reader, subscribe.Options{
		Notifier:          notifier,
		WatchInterval:     cfg.SubscribeWatchInterval,
		IdleAfter:         cfg.SubscribeIdleAfter,
		ConsumerPositions: positions,
		Logger:            cfg.Logger,
	})
	svc.subscribe = s.subscribe
	s.purger = shard.NewPurger(cfg.Store, 2, cfg.Logger)
	svc.cons = consumers{store: cons, tails: s.subscribe}
	svc.life = lifecycle{store: countedStore{cfg.Store}, listLimiter: cfg.ListLimiter, listTotal: cfg.ListTotalLimiter, summaries: make(chan struct{}, summarySlots), errLog: s.errLog, authz: cfg.Authorizer, purger: s.purger, log: cfg.Logger, batchGetBytes: cfg.BatchGetBytes}
	return svc
}

// writerOptions are cfg.Writer with the server's own logger, cache,
// notifier and hooks.
func (s *Server) writerOptions(cache *shard.BlobCache, notifier *shard.Notifier) shard.Options {
	wopts := s.cfg.Writer
	wopts.Logger = s.cfg.Logger
	wopts.Cache = cache
	wopts.Notifier = notifier
	wopts.OnMerge = s.metrics.observeMerge
	wopts.OnFence = s.metrics.logFences.Inc
	wopts.OnCheckpoint = s.metrics.checkpoints.Inc
	// The writer set's writers of one shard follow each other in this
	// process: a writer that ended with a create in doubt (evicted, or
	// aborted by a Close that timed out) hands it over through the
	// lineage, with no I/O, and the shard's next writer fences the log.
	if wopts.Lineage == nil {
		wopts.Lineage = shard.NewLineage()
	}
	if wopts.Clock == nil {
		wopts.Clock = s.cfg.Clock
	}
	return wopts
}

// registerMetrics registers the server's collectors with reg, and the
// gauges read from the writer set and cache.
func (s *Server) registerMetrics(reg prometheus.Registerer, cache *shard.BlobCache) error {
	gauges := []prometheus.Collector{
		newGaugeFunc("rolloutd_writer_queued_bytes",
			"Bytes of records queued or in flight on this instance's shard writers.",
			func() float64 { return float64(s.writers.queuedBytes()) }),
		newGaugeFunc("rolloutd_shard_generations_max",
			"Most live generations of any shard this instance writes; merges keep it near the count trigger, so growth is a merge backlog.",
			func() float64 { most, _ := s.writers.generations(); return float64(most) }),
		newGaugeFunc("rolloutd_shard_generations",
			"Live generations over every shard this instance writes.",
			func() float64 { _, total := s.writers.generations(); return float64(total) }),
		newGaugeFunc("rolloutd_index_cache_bytes",
			"Bytes held by the shared generation footer-index cache.",
			func() float64 { return float64(cache.Bytes()) }),
		newGaugeFunc("rolloutd_presence_bytes",
			"Bytes that shard writers hold to answer appends' id look-ups from memory, at most --presence-budget-bytes.",
			func() float64 { return float64(s.cfg.Writer.Presence.Bytes()) }),
		newGaugeFunc("rolloutd_subscriptions",
			"Subscribe streams running on this instance.",
			func() float64 { return float64(s.subscribe.Subscriptions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rolloutd_subscribe_watch_list_pages_total",
			Help: "Listing pages the subscription watchers requested (one watcher per subscribed prefix lists it every --subscribe-watch-interval)."},
			func() float64 { return float64(s.subscribe.ListPages()) }),
		newGaugeFunc("rolloutd_subscribe_shard_readers",
			"Shared shard readers that subscriptions on this instance ride, parked ones included.",
			func() float64 { return float64(s.subscribe.Readers()) }),
		newGaugeFunc("rolloutd_subscribe_shard_readers_parked",
			"Of rolloutd_subscribe_shard_readers, those parked: their shard was idle, so they read only when woken.",
			func() float64 { return float64(s.subscribe.Parked()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rolloutd_presence_sheds_total",
			Help: "Times a shard writer's in-memory id look-ups were dropped to make room in --presence-budget-bytes for another's; growing steadily, the shards appended to do not fit."},
			func() float64 { return float64(s.cfg.Writer.Presence.Sheds()) }),
	}
	all := append(append([]prometheus.Collector{}, s.metrics.collectors...), gauges...)
	all = append(append(all, s.guard.collectors()...), s.admission.collectors()...)
	for _, c := range append(all, s.errLog.dropped) {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("server: register metrics: %w", err)
		}
	}
	return nil
}

// grpcOptions are the gRPC server's options: limits, interceptors, the
// codec, then the connection limits, the admission's and cfg's own.
func (s *Server) grpcOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(s.cfg.MaxMessageBytes),
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
		// Streams run on goroutines that live on: a fresh goroutine per
		// RPC grew its stack, copying it, several times on every call.
		grpc.NumStreamWorkers(streamWorkers),
	}
	opts = append(opts, s.cfg.connOptions()...)
	opts = append(opts, s.admission.options()...)
	return append(opts, s.cfg.ServerOptions...)
}

// streamWorkers is how many goroutines wait to run RPCs; an RPC that finds
// them all busy (an Append waits for its commit) gets a goroutine of its
// own, as without them. Enough for 64 appending clients at once; each idle
// one holds a stack of a few KiB.
const streamWorkers = 64

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
	// Every following Scan and subscription has ended: stop the shard
	// readers and the prefix watchers they left.
	s.follow.Close()
	s.subscribe.Close()
	// A purge cut short here is finished by the next DeleteShard of the
	// shard, or rolloutd admin purge.
	s.purger.Close()

	closed, failed := s.writers.closeAll(ctx)
	if failed > 0 && ctx.Err() != nil {
		s.metrics.shutdownTimeouts.WithLabelValues(shutdownStageWriters).Inc()
	}
	s.log.Info("shutdown: writers closed", zap.Int("closed", closed), zap.Int("aborted", failed), zap.Duration("elapsed", time.Since(start)))
}
