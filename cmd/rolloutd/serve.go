package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/instrumented"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/tracing"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve gRPC and /metrics until SIGTERM or SIGINT (the default: rolloutd [flags] is rolloutd serve [flags])",
		run:     runServe,
	})
}

// runServe parses serve's flags and environment, then serves until a
// signal.
func runServe(args []string, stdout, _ io.Writer) error {
	cfg, err := parseConfig(args, os.Getenv, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil
	case errors.Is(err, errPrintVersion):
		printVersion(stdout)
		return nil
	case err != nil:
		return err
	}
	cfg.unknownEnv = unknownEnvVars(os.Environ(), cfg.flagNames)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return serve(ctx, stop, cfg)
}

// storeOpenTimeout bounds opening the store at startup (Azure: checking or
// creating the container).
const storeOpenTimeout = 30 * time.Second

// serve runs rolloutd until ctx ends (a signal), then shuts it down within
// cfg.ShutdownTimeout. stopSignals restores the default signal handling, so
// that a second signal during shutdown kills the process.
func serve(ctx context.Context, stopSignals func(), cfg *config) error {
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	warnUnknownEnv(log, cfg.unknownEnv)
	cfg.warnDeprecated(log)
	tp, err := startTracing(ctx, cfg, log)
	if err != nil {
		return err
	}
	// The normal path flushes within the shutdown budget below; this only
	// stops the exporter on the paths that fail before serving.
	defer shutdownTracing(tp, log, time.Second)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sec, err := newSecurity(cfg, log, reg)
	if err != nil {
		return err
	}
	defer sec.Close()

	// Bound before the store opens: a start that cannot listen (a port in
	// use) creates no data directory and no container.
	ls, err := listen(cfg)
	if err != nil {
		return err
	}
	served := false
	created := missingDir(cfg)
	defer func() {
		// Runs after the store is closed.
		if !served {
			abandonStart(ls, created, log)
		}
	}()
	store, closeStore, err := openStore(ctx, cfg, log, reg)
	if err != nil {
		return err
	}
	defer warnIfFails(log, "closing the store", closeStore)
	reg.MustRegister(storeFailedGauge(store))
	warnIfEmpty(ctx, store, cfg, log)

	scfg := server.Config{
		Store:      instrumented.New(store, instrumented.NewMetrics(reg)),
		Logger:     log,
		Registerer: reg,
		MaxWriters: cfg.MaxWriters,
		Writer: shard.Options{
			MaxQueuedBytes:    int64(cfg.WriterQueueBytes),
			DisableBackground: cfg.DisableMerge,
			CommitTimeout:     cfg.CommitTimeout,
		},
		MaxMessageBytes: int(cfg.MaxMessageBytes),
		MaxBatchRecords: cfg.MaxBatchRecords,
		MaxRecordBytes:  int(cfg.MaxRecordBytes),
		DefaultDeadline: cfg.DefaultDeadline,
		DrainDelay:      cfg.DrainDelay,

		RequestBudgetBytes: int64(cfg.RequestBudgetBytes),
		RecvTimeout:        cfg.RecvTimeout,
		SendTimeout:        cfg.SendTimeout,
		TracerProvider:     tp.TracerProvider(),

		SubscribeWatchInterval: cfg.SubscribeWatchInterval,
		SubscribeIdleAfter:     cfg.SubscribeIdleAfter,
	}
	cfg.applyCaches(&scfg)
	sec.apply(&scfg)
	srv, err := server.New(scfg)
	if err != nil {
		return err
	}

	served = true // Serve and metrics.Serve close the listeners from here on
	return serveUntilDone(ctx, stopSignals, cfg, log, running{tp: tp, srv: srv, reg: reg, store: store, sec: sec, ls: ls})
}

// running is what serve built, for serveUntilDone.
type running struct {
	tp    *tracing.Provider
	srv   *server.Server
	reg   *prometheus.Registry
	store blob.Store
	sec   *security
	ls    *listeners
}

// serveUntilDone serves on r's listeners until ctx ends or one of them,
// or the store, fails, then shuts r down within cfg.ShutdownTimeout. It
// returns that failure, if any.
func serveUntilDone(ctx context.Context, stopSignals func(), cfg *config, log *zap.Logger, r running) error {
	srv := r.srv
	lis, mlis, hlis := r.ls.grpc, r.sec.metricsListener(r.ls.metrics, log), r.ls.health
	metrics := newMetricsServer(server.DebugHandler(r.reg, cfg.Pprof), metricsIdleTimeout)

	errc := make(chan error, 4)
	stopWatch := watchStore(r.store, errc)
	defer stopWatch()
	if hlis != nil {
		go func() {
			if err := srv.ServeHealth(hlis); err != nil {
				errc <- fmt.Errorf("health server: %w", err)
			}
		}()
	}
	go func() {
		if err := srv.Serve(lis); err != nil {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()
	go func() {
		log.Info("serving metrics", zap.String("addr", mlis.Addr().String()))
		if err := metrics.Serve(mlis); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics server: %w", err)
		}
	}()
	log.Info("rolloutd started", zap.String("version", version), zap.String("commit", buildCommit()), zap.String("store", cfg.store.String()), zap.Int("max_writers", cfg.MaxWriters))

	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutdown: signal received", zap.Duration("timeout", cfg.ShutdownTimeout))
	case failed = <-errc:
		log.Error("shutdown: a listener or the store failed", zap.Error(failed))
	}
	stopSignals()
	shutdown(cfg, log, r.tp, srv, metrics)
	return failed
}

// shutdown stops the server, then flushes the spans and stops the
// metrics listener, all within cfg.ShutdownTimeout: the server gets 90%
// of it, the rest is for the metrics listener, the store and exiting.
func shutdown(cfg *config, log *zap.Logger, tp *tracing.Provider, srv *server.Server, metrics *http.Server) {
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout*9/10)
	defer cancel()
	srv.Shutdown(sctx)
	// The spans of the last calls go out once every call has ended.
	shutdownTracing(tp, log, max(cfg.ShutdownTimeout-time.Since(start), 0)/2)
	mctx, mcancel := context.WithTimeout(context.Background(), max(cfg.ShutdownTimeout-time.Since(start), 0)/2)
	defer mcancel()
	if err := metrics.Shutdown(mctx); err != nil {
		metrics.Close()
	}
	log.Info("rolloutd stopped", zap.Duration("shutdown", time.Since(start)))
}

// warnUnknownEnv warns about each ROLLOUTD_* variable in names, which
// name no flag.
func warnUnknownEnv(log *zap.Logger, names []string) {
	for _, name := range names {
		log.Warn("ignoring an environment variable that names no flag", zap.String("name", name), zap.String("hint", "every flag is also ROLLOUTD_<FLAG_IN_CAPS>; see rolloutd --help"))
	}
}

// startTracing starts the tracer provider of cfg.tracing (nil when
// tracing is off).
func startTracing(ctx context.Context, cfg *config, log *zap.Logger) (*tracing.Provider, error) {
	tp, err := tracing.New(ctx, cfg.tracing, log.Named("tracing"), version)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		log.Info("tracing: exporting spans over OTLP/gRPC", zap.String("sampler", cfg.tracing.Sampler), zap.Float64("ratio", cfg.tracing.Ratio))
	}
	return tp, nil
}

// warnIfFails calls f, and logs its error, if any, as a warning with msg.
func warnIfFails(log *zap.Logger, msg string, f func() error) {
	if err := f(); err != nil {
		log.Warn(msg, zap.Error(err))
	}
}

// abandonStart undoes a start that failed before serving: it leaves no
// directory it created behind, then frees the ports. The directory goes
// while the ports are still held, so that a restarted rolloutd, which
// cannot bind them until then, cannot create the directory anew before
// this one removes it.
func abandonStart(ls *listeners, created string, log *zap.Logger) {
	removeCreated(created, log)
	ls.close()
}

// removeCreated removes created, the store directory that a start that
// failed created ("" for none).
func removeCreated(created string, log *zap.Logger) {
	if created == "" {
		return
	}
	if err := os.RemoveAll(created); err != nil {
		log.Warn("removing the store directory this failed start created", zap.String("dir", created), zap.Error(err))
	}
}

// listeners are serve's sockets.
type listeners struct{ grpc, metrics, health net.Listener }

// listen binds --listen, --metrics-listen and --health-listen (if set).
func listen(cfg *config) (*listeners, error) {
	ls := &listeners{}
	var err error
	if ls.grpc, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	if ls.metrics, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
		ls.close()
		return nil, fmt.Errorf("--metrics-listen %s: %w", cfg.MetricsListen, err)
	}
	if cfg.HealthListen != "" {
		if ls.health, err = net.Listen("tcp", cfg.HealthListen); err != nil {
			ls.close()
			return nil, fmt.Errorf("--health-listen %s: %w", cfg.HealthListen, err)
		}
	}
	return ls, nil
}

func (ls *listeners) close() {
	for _, l := range []net.Listener{ls.grpc, ls.metrics, ls.health} {
		if l != nil {
			l.Close()
		}
	}
}

// missingDir is the outermost directory that opening the local store will
// create (the store's directory or an ancestor), or "" if it exists
// already or the store is not local: only that one may a failed start
// remove.
func missingDir(cfg *config) string {
	if cfg.store.Container != "" || cfg.store.Dir == "" {
		return ""
	}
	missing := ""
	for d := filepath.Clean(cfg.store.Dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			return missing
		}
		missing = d
		if filepath.Dir(d) == d {
			return ""
		}
	}
}

// shutdownTracing flushes the spans tp holds and stops its exporter,
// within budget; a span that misses it is dropped. A later call does
// nothing.
func shutdownTracing(tp *tracing.Provider, log *zap.Logger, budget time.Duration) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing spans at shutdown", zap.Error(err))
	}
}

// openStore opens the one blob store of the process, the only place that
// knows which backend is in use. Every writer and the reader share it; for
// Azure that is one client over one connection pool. The local store's
// metrics, and the Azure tries (rolloutd_blob_tries_total), are registered
// on reg.
func openStore(ctx context.Context, cfg *config, log *zap.Logger, reg prometheus.Registerer) (blob.Store, func() error, error) {
	// Registered on either backend, so that dashboards and alerts find the
	// series (at 0 on the local store).
	tries := azure.NewTryMetrics(reg)
	if cfg.store.Container == "" {
		s, err := localstore.Open(cfg.store.Dir, localstore.WithGroupObserver(localGroupMetrics(reg)), localstore.WithBarrier(cfg.LocalBarrier))
		if err != nil {
			return nil, nil, fmt.Errorf("--store %s: %w", cfg.Store, err)
		}
		log.Info("store opened", zap.String("backend", "local"), zap.String("dir", s.Dir()), zap.Stringer("barrier", s.Barrier()))
		return s, s.Close, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	s, err := azure.New(ctx, azure.Config{
		Tries:            tries,
		Container:        cfg.store.Container,
		Prefix:           cfg.store.Prefix,
		ConnectionString: cfg.azureConn,
		AccountURL:       cfg.AzureAccountURL,
		MaxConns:         cfg.AzureMaxConns,
		Logger:           log.Named("azure"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("--store %s: %w", cfg.Store, err)
	}
	auth := "connection string"
	if cfg.AzureAccountURL != "" {
		auth = "account URL " + cfg.AzureAccountURL
	}
	log.Info("store opened", zap.String("backend", "azblob"), zap.String("container", cfg.store.Container),
		zap.String("prefix", cfg.store.Prefix), zap.String("auth", auth), zap.Int("max_conns", cfg.AzureMaxConns))
	return s, s.Close, nil
}

// warnIfEmpty logs a warning when the store holds no shard at all: a new
// store is also what a mistyped --store serves, silently, so the first
// start of a fresh store says so (once, at start; an empty store is
// served as usual). One listing of at most one name, on either backend.
func warnIfEmpty(ctx context.Context, store blob.Store, cfg *config, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	page, err := store.List(ctx, blob.ListOptions{Prefix: format.ShardsRoot, Max: 1})
	switch {
	case err != nil:
		log.Warn("could not check whether the store holds any shard", zap.String("store", cfg.store.String()), zap.Error(err))
	case len(page.Items) == 0:
		log.Warn("store is new or empty: it holds no shards; if you expected data, check --store",
			zap.String("store", cfg.store.String()))
	}
}

// localGroupMetrics registers rolloutd_localstore_sync_group_size and
// rolloutd_localstore_sync_group_seconds and returns what observes them.
func localGroupMetrics(reg prometheus.Registerer) func(int, time.Duration) {
	size := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rolloutd_localstore_sync_group_size",
		Help:    "Puts the local store made durable together, in one group sharing its fsyncs (writes of every shard).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10),
	})
	secs := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rolloutd_localstore_sync_group_seconds",
		Help:    "Time from the start of a group of puts to its outcome: file fsyncs, publishing, directory fsyncs.",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14),
	})
	reg.MustRegister(size, secs)
	return func(n int, d time.Duration) {
		size.Observe(float64(n))
		secs.Observe(d.Seconds())
	}
}

// failer is a store that can fail for good, such as the local store after
// a failed fsync of a change it had already made visible: Failed then
// returns the error with which it refuses every call until the process
// restarts.
type failer interface{ Failed() error }

// watchStore sends to errc when store fails for good, so that rolloutd shuts
// down and exits non-zero: it refuses every call until restarted, and only
// a restart, by the supervisor, reads back what is really on disk. The
// returned func stops the watch and waits for it.
func watchStore(store blob.Store, errc chan<- error) (stop func()) {
	f, ok := store.(interface {
		failer
		FailedC() <-chan struct{}
	})
	if !ok {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-f.FailedC():
			errc <- fmt.Errorf("the store failed for good; exiting so that a restart reads back what is on disk: %w", f.Failed())
		case <-quit:
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// metricsIdleTimeout closes a keep-alive connection to the metrics port
// that sends no request for this long. A scraper every 15 s keeps its
// connection; without it, idle connections piled up (1,000 were all still
// open after 25 s), each holding a file descriptor and a goroutine.
const metricsIdleTimeout = 20 * time.Second

// newMetricsServer is the metrics and debug HTTP server. ReadHeaderTimeout
// also closes a connection that never sends its first request.
func newMetricsServer(h http.Handler, idle time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle}
}

// storeFailedGauge is rolloutd_store_failed: 1 once store has failed for
// good, else 0 (always 0 for a store that cannot fail so).
func storeFailedGauge(store blob.Store) prometheus.GaugeFunc {
	f, _ := store.(failer)
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rolloutd_store_failed",
		Help: "1 once the store has failed for good (the local store after a failed fsync of a change it had made visible, which may be lost in a crash): it refuses every call until rolloutd is restarted; the disk may be failing.",
	}, func() float64 {
		if f != nil && f.Failed() != nil {
			return 1
		}
		return 0
	})
}

// newLogger builds the process logger: JSON lines, or a console encoder
// for people, at the configured level, to stderr.
func newLogger(cfg *config) (*zap.Logger, error) {
	return buildLogger(cfg.LogFormat, cfg.logLevel)
}

// loggerConfig is the one place rolloutd's loggers are configured, for
// both encoders: format "console" is for people, anything else JSON lines.
// Both write times as ISO 8601 and durations as "10s", so that a log line
// reads the same in either.
func loggerConfig(format string, level zapcore.Level) zap.Config {
	zc := zap.NewProductionConfig()
	zc.Sampling = nil // lifecycle lines are never sampled; the access log samples itself
	if format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
		zc.DisableStacktrace = true
	}
	zc.Level = zap.NewAtomicLevelAt(level)
	zc.EncoderConfig.TimeKey = "ts"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zc.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	return zc
}

// buildLogger builds a logger of loggerConfig, to stderr.
func buildLogger(format string, level zapcore.Level) (*zap.Logger, error) {
	zc := loggerConfig(format, level)
	log, err := zc.Build()
	if err != nil {
		return nil, fmt.Errorf("build logger: %w", err)
	}
	return log, nil
}
