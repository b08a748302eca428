package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/instrumented"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// bench is one run: the store, Azurite when the run started it, the target,
// and what every phase shares.
type bench struct {
	cfg      *config
	log      *zap.Logger
	out      io.Writer
	progress *progress
	runID    string // lowercase, unique per run: names every shard and blob the run writes

	azurite *azurite.Instance
	// store is the shared raw store (nil for a remote target given no
	// --store): one client, one connection pool, for every in-process
	// writer, reader and floor.
	store     blob.Store
	storeDesc string
	// localDir is the local store's directory ("" for other stores).
	localDir string
	closers  []func() error
	// closeStore closes an Azure store, which fresh replaces.
	closeStore func() error
	// azuriteRuns counts the Azurite instances this run started; used
	// tells whether the first one has served a target yet.
	azuriteRuns int
	used        bool
	ep          *endpoint    // the blob endpoint, for socket counts; nil unless azblob
	http        *httpCounter // HTTP requests of every Azure client the run builds
	azCfg       azure.Config

	target    *client.Client // --target
	getTarget *client.Client // --get-target
	scrape    *scraper

	content string // the content of every record: RecordBytes bytes

	// diagnostics are lines --compare prints under the targets: figures of
	// diagnostic phases, which are not rolloutd's defaults.
	diagnostics []string

	recSeq atomic.Int64
}

// httpCounter counts HTTP requests and the new (not reused) connections
// they took, below the Azure SDK: retries and container checks included.
type httpCounter struct {
	requests, conns atomic.Int64
}

func (h *httpCounter) snapshot() [2]int64 { return [2]int64{h.requests.Load(), h.conns.Load()} }

func (h *httpCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		h.requests.Add(1)
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				h.conns.Add(1)
			}
		}}
		return next.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func newRunID() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// setup opens the store (starting Azurite first if asked) and dials the
// targets.
func (b *bench) setup(ctx context.Context) error {
	cfg := b.cfg
	b.content = strings.Repeat("x", cfg.RecordBytes)
	if cfg.Compare {
		b.content = strings.Repeat("x", 1024) // the targets are defined for 1 KiB records
	}
	if cfg.Azurite != "" {
		fmt.Fprintf(b.out, "starting Azurite (%s%s)…\n", cfg.Azurite, map[bool]string{true: ", RSA-2048 self-signed certificate"}[cfg.Azurite == "https"])
		if err := b.startAzurite(); err != nil {
			return err
		}
		b.closers = append(b.closers, b.stopAzurite)
	}
	switch cfg.store.Kind {
	case "mem":
		b.store, b.storeDesc = memstore.New(), "in-memory store"
	case "local":
		dir := cfg.store.Dir
		if dir == "" {
			tmp, err := os.MkdirTemp("", "rolloutbench-")
			if err != nil {
				return err
			}
			b.closers = append(b.closers, func() error { return os.RemoveAll(tmp) })
			dir = tmp
		}
		s, err := localstore.Open(dir)
		if err != nil {
			return fmt.Errorf("--store %s: %w", cfg.store, err)
		}
		b.closers = append(b.closers, s.Close)
		b.store, b.storeDesc, b.localDir = s, "embedded local-disk store ("+dir+")", s.Dir()
	case "azblob":
		if err := b.setupAzure(ctx); err != nil {
			return err
		}
		b.closers = append(b.closers, func() error {
			if b.closeStore == nil {
				return nil
			}
			return b.closeStore()
		})
	}
	if cfg.Target != "" {
		var err error
		if b.target, err = b.dial(cfg.Target); err != nil {
			return err
		}
		b.getTarget = b.target
		if cfg.GetTarget != "" {
			if b.getTarget, err = b.dial(cfg.GetTarget); err != nil {
				return err
			}
		}
		b.scrape = &scraper{url: cfg.MetricsURL, client: &http.Client{Timeout: 10 * time.Second}}
		if _, err := b.scrape.Gather(); err != nil {
			fmt.Fprintf(b.out, "note: %v; server-side figures (blob ops, RSS, evictions) will be missing\n", err)
			b.scrape = nil
		}
	}
	return nil
}

func (b *bench) startAzurite() error {
	cfg := b.cfg
	inst, err := azurite.StartMain(azurite.Options{HTTPS: cfg.Azurite == "https", RSA: cfg.Azurite == "https", ExtentMemoryLimitMB: 1024})
	if err != nil {
		return err
	}
	b.azurite = inst
	b.azuriteRuns++
	cfg.azureConn = inst.ConnectionString
	return nil
}

func (b *bench) stopAzurite() error {
	if b.azurite == nil {
		return nil
	}
	err := b.azurite.Stop()
	b.azurite = nil
	return err
}

// fresh gives the next target an Azurite of its own, when this run
// started Azurite: the emulator slows down as blobs accumulate (measured
// here: a 1 KiB floor append's p50 went from 3.6 ms to 11 ms after 9,000
// floor appends, in any container), which real Azure does not, so a target
// measured after others would pay for their blobs. It replaces the shared
// store; the old Azurite's TIME_WAIT sockets stay behind on its port,
// apart from the new endpoint's.
func (b *bench) fresh(ctx context.Context) error {
	if b.azurite == nil || b.azuriteRuns == 0 {
		return nil
	}
	if b.azuriteRuns == 1 && !b.used {
		b.used = true
		return nil
	}
	if b.closeStore != nil {
		_ = b.closeStore()
		b.closeStore = nil
	}
	if err := b.stopAzurite(); err != nil {
		return fmt.Errorf("stopping Azurite: %w", err)
	}
	if err := b.startAzurite(); err != nil {
		return err
	}
	return b.setupAzure(ctx)
}

func (b *bench) setupAzure(ctx context.Context) error {
	cfg := b.cfg
	var rootCAs *x509.CertPool
	if b.azurite != nil {
		rootCAs = b.azurite.RootCAs
	}
	b.http = &httpCounter{}
	b.azCfg = azure.Config{
		Container:        cfg.store.Container,
		Prefix:           cfg.store.Prefix,
		ConnectionString: cfg.azureConn,
		RootCAs:          rootCAs,
		WrapTransport:    b.http.wrap,
		Logger:           b.log.Named("azure"),
	}
	shared := b.azCfg
	shared.MaxConns = cfg.AzureMaxConns
	s, err := azure.New(ctx, shared)
	if err != nil {
		return fmt.Errorf("--store %s: %w", cfg.store, err)
	}
	b.closeStore = s.Close
	b.store = s
	b.storeDesc = "Azure Blob"
	if b.azurite != nil {
		b.storeDesc = "Azurite over " + strings.ToUpper(cfg.Azurite)
	}
	b.ep = blobEndpoint(cfg.azureConn)
	return nil
}

// blobEndpoint finds the blob service's address in a connection string
// (BlobEndpoint=, or the account's default endpoint), or nil.
func blobEndpoint(conn string) *endpoint {
	host, port, ok := parseBlobEndpoint(conn)
	if !ok {
		return nil
	}
	return resolveEndpoint(host, port)
}

func parseBlobEndpoint(conn string) (host string, port int, ok bool) {
	var raw, account, suffix, proto string
	for kv := range strings.SplitSeq(conn, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "blobendpoint":
			raw = v
		case "accountname":
			account = v
		case "endpointsuffix":
			suffix = v
		case "defaultendpointsprotocol":
			proto = v
		}
	}
	if raw == "" && account != "" {
		if suffix == "" {
			suffix = "core.windows.net"
		}
		if proto == "" {
			proto = "https"
		}
		raw = proto + "://" + account + ".blob." + suffix
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", 0, false
	}
	port = 443
	if u.Scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil {
			return "", 0, false
		}
	}
	return u.Hostname(), port, true
}

// dial connects to a remote target through the client package.
func (b *bench) dial(addr string) (*client.Client, error) {
	var opts []client.Option
	if b.cfg.TargetTLS {
		opts = append(opts, client.WithTLS(client.TLSConfig{CAFile: b.cfg.TargetCA}))
	}
	c, err := newGRPCClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", addr, err)
	}
	b.closers = append(b.closers, c.Close)
	return c, nil
}

// newGRPCClient is the client package as the product path's phases use it:
// every operation is one RPC, so retries are off (a failure is counted,
// never hidden by a resend) and an attempt has no timeout of its own, as
// before the package existed; the request_id, the shard header and the
// error decoding, which every caller of the package pays for, stay in.
func newGRPCClient(target string, opts ...client.Option) (*client.Client, error) {
	return client.New(target, append([]client.Option{
		client.WithRetry(client.RetryPolicy{MaxAttempts: 1}),
		client.WithAttemptTimeout(24 * time.Hour),
		client.WithMaxMessageBytes(64 << 20),
	}, opts...)...)
}

// fsFloorDir creates a directory for the floor-fs mode beside the local
// store's, on the same file system; the run removes it at its end.
func (b *bench) fsFloorDir(name string) (string, error) {
	dir := fmt.Sprintf("%s-floor-%s-%s", b.localDir, b.runID, name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("floor-fs: %w", err)
	}
	b.closers = append(b.closers, func() error { return os.RemoveAll(dir) })
	return dir, nil
}

func (b *bench) close() error {
	var errs []error
	for i := len(b.closers) - 1; i >= 0; i-- {
		if err := b.closers[i](); err != nil {
			errs = append(errs, err)
		}
	}
	b.closers = nil
	return errors.Join(errs...)
}

// newStoreForAppend builds what the per-append design builds for each
// append: for Azure a new client over a new transport.
func (b *bench) newStoreForAppend(ctx context.Context) (blob.Store, func() error, error) {
	if b.cfg.store.Kind != "azblob" {
		return b.store, func() error { return nil }, nil
	}
	c := b.azCfg
	c.Logger = zap.NewNop()
	s, err := azure.New(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// newRecord builds one record of the run: a unique id and RecordBytes of
// content.
func (b *bench) newRecord(client int) *rolloutv1.Record {
	n := b.recSeq.Add(1)
	return &rolloutv1.Record{
		Id:        fmt.Sprintf("%s-%d-%d", b.runID, client, n),
		RolloutId: fmt.Sprintf("rollout-%d", client),
		Role:      rolloutv1.Role_ROLE_ASSISTANT,
		Content:   b.content,
	}
}

// inprocServer is rolloutd's server, in this process, on loopback gRPC,
// over the shared store wrapped in the blob/instrumented decorator, as
// cmd/rolloutd wires it.
type inprocServer struct {
	srv  *server.Server
	reg  *prometheus.Registry
	conn *client.Client
	done chan error
}

func (b *bench) startServer(store blob.Store, maxWriters int, writer shard.Options) (*inprocServer, error) {
	return b.startServerWith(store, maxWriters, writer, nil)
}

// startServerWith is startServer with tweak (when set) applied to the
// server's configuration.
func (b *bench) startServerWith(store blob.Store, maxWriters int, writer shard.Options, tweak func(*server.Config)) (*inprocServer, error) {
	reg := prometheus.NewRegistry()
	cfg := server.Config{
		Store:      instrumented.New(store, instrumented.NewMetrics(reg)),
		Logger:     b.log,
		Registerer: reg,
		MaxWriters: maxWriters,
		Writer:     writer,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &inprocServer{srv: srv, reg: reg, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(lis) }()
	conn, err := newGRPCClient("passthrough:///" + lis.Addr().String())
	if err != nil {
		s.stop()
		return nil, err
	}
	s.conn = conn
	return s, nil
}

func (s *inprocServer) figures() (serverFigures, error) { return figuresOf(s.reg) }

// stop shuts the server down (closing its writers) and waits for Serve.
func (s *inprocServer) stop() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	<-s.done
}
