package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
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
	for _, name := range cfg.unknownEnv {
		log.Warn("ignoring an environment variable that names no flag", zap.String("name", name), zap.String("hint", "every flag is also ROLLOUTD_<FLAG_IN_CAPS>; see rolloutd --help"))
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	sec, err := newSecurity(cfg, log, reg)
	if err != nil {
		return err
	}
	defer sec.Close()

	store, closeStore, err := openStore(ctx, cfg, log, reg)
	if err != nil {
		return err
	}
	defer func() {
		if err := closeStore(); err != nil {
			log.Warn("closing the store", zap.Error(err))
		}
	}()
	reg.MustRegister(storeFailedGauge(store))

	scfg := server.Config{
		Store:      instrumented.New(store, instrumented.NewMetrics(reg)),
		Logger:     log,
		Registerer: reg,
		MaxWriters: cfg.MaxWriters,
		Writer: shard.Options{
			MaxQueuedBytes:    int64(cfg.WriterQueueBytes),
			DisableBackground: cfg.DisableMerge,
			CommitTimeout:     cfg.CommitTimeout,
			Protocol:          cfg.commitProtocol,
		},
		IndexCacheBytes: int64(cfg.IndexCacheBytes),
		MaxMessageBytes: int(cfg.MaxMessageBytes),
		MaxBatchRecords: cfg.MaxBatchRecords,
		MaxRecordBytes:  int(cfg.MaxRecordBytes),
		DefaultDeadline: cfg.DefaultDeadline,
		DrainDelay:      cfg.DrainDelay,

		RequestBudgetBytes: int64(cfg.RequestBudgetBytes),
		RecvTimeout:        cfg.RecvTimeout,
		SendTimeout:        cfg.SendTimeout,
	}
	sec.apply(&scfg)
	srv, err := server.New(scfg)
	if err != nil {
		return err
	}

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.Listen, err)
	}
	mlis, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		lis.Close()
		return fmt.Errorf("--metrics-listen %s: %w", cfg.MetricsListen, err)
	}
	mlis = sec.metricsListener(mlis, log)
	var hlis net.Listener
	if cfg.HealthListen != "" {
		if hlis, err = net.Listen("tcp", cfg.HealthListen); err != nil {
			lis.Close()
			mlis.Close()
			return fmt.Errorf("--health-listen %s: %w", cfg.HealthListen, err)
		}
	}
	metrics := newMetricsServer(server.DebugHandler(reg, cfg.Pprof), metricsIdleTimeout)

	errc := make(chan error, 4)
	stopWatch := watchStore(store, errc)
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

	// The whole sequence fits cfg.ShutdownTimeout: the server gets 90% of
	// it, the rest is for the metrics listener, the store and exiting.
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout*9/10)
	defer cancel()
	srv.Shutdown(sctx)
	mctx, mcancel := context.WithTimeout(context.Background(), max(cfg.ShutdownTimeout-time.Since(start), 0)/2)
	defer mcancel()
	if err := metrics.Shutdown(mctx); err != nil {
		metrics.Close()
	}
	log.Info("rolloutd stopped", zap.Duration("shutdown", time.Since(start)))
	return failed
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
		s, err := localstore.Open(cfg.store.Dir, localstore.WithGroupObserver(localGroupMetrics(reg)))
		if err != nil {
			return nil, nil, fmt.Errorf("--store %s: %w", cfg.Store, err)
		}
		log.Info("store opened", zap.String("backend", "local"), zap.String("dir", s.Dir()))
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
	zc := zap.NewProductionConfig()
	zc.Sampling = nil // lifecycle lines are never sampled; the access log samples itself
	if cfg.LogFormat == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
		zc.DisableStacktrace = true
	}
	zc.Level = zap.NewAtomicLevelAt(cfg.logLevel)
	zc.EncoderConfig.TimeKey = "ts"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := zc.Build()
	if err != nil {
		return nil, fmt.Errorf("build logger: %w", err)
	}
	return log, nil
}
