package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/tracing"
)

// envPrefix prefixes the environment variable of every flag:
// --max-writers is also ROLLOUTD_MAX_WRITERS.
const envPrefix = "ROLLOUTD_"

// Environment variables that supply Azure credentials and endpoints only.
const (
	envConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	envAccountURL       = "AZURE_STORAGE_ACCOUNT_URL"
)

// config is everything rolloutd is configured with. Flags fill it, then
// ROLLOUTD_* environment variables for flags not given, then defaults.
type config struct {
	Listen        string
	MetricsListen string

	Store           string
	AzureAccountURL string
	AzureMaxConns   int

	MaxWriters       int
	WriterQueueBytes byteSize
	IndexCacheBytes  byteSize
	PresenceBytes    byteSize
	LocalBarrier     localstore.Barrier
	DisableMerge     bool
	CommitTimeout    time.Duration
	CommitProtocol   string // deprecated: "" or v2 (commitProtocolUnset)

	MaxMessageBytes byteSize
	MaxBatchRecords int
	MaxRecordBytes  byteSize
	DefaultDeadline time.Duration

	RequestBudgetBytes byteSize // 0: from the memory limit
	RecvTimeout        time.Duration
	SendTimeout        time.Duration
	// Subscriptions (server.Config's Subscribe* fields).
	SubscribeWatchInterval time.Duration
	SubscribeIdleAfter     time.Duration

	ShutdownTimeout time.Duration
	DrainDelay      time.Duration

	LogFormat string
	LogLevel  string

	securityConfig // TLS, mTLS, authorization, limits (security.go)

	// Derived by validate.
	store     storeLocation
	logLevel  zapcore.Level
	azureConn string // from AZURE_STORAGE_CONNECTION_STRING or --azure-connection-string-file; never logged

	flagNames  []string // every flag serve knows
	unknownEnv []string // ROLLOUTD_* variables that name no flag (env.go); serve warns about them

	// tracing is from the standard OTEL_* variables, which are not flags
	// (docs/operations.md, Tracing).
	tracing tracing.Settings
}

// storeLocation is a parsed --store.
type storeLocation struct {
	Dir       string // local directory, absolute
	Container string // azblob container
	Prefix    string // azblob name prefix, may be empty
}

func (l storeLocation) String() string {
	if l.Container != "" {
		return "azblob://" + strings.TrimSuffix(l.Container+"/"+l.Prefix, "/")
	}
	return "file://" + l.Dir
}

// serviceMethods lists RolloutService's RPCs in the proto's order, read
// from its descriptor so that the help never falls behind the service.
func serviceMethods() string {
	methods := rolloutv1.File_rollout_v1_rollout_proto.Services().ByName("RolloutService").Methods()
	names := make([]string, methods.Len())
	for i := range names {
		names[i] = string(methods.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// parseConfig parses args (without the program name) and the environment
// (getenv) into a validated config. It writes usage to out for --help and
// returns flag.ErrHelp then; it returns errPrintVersion for --version. A
// bad value fails with a message naming the flag.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (*config, error) {
	c := &config{
		WriterQueueBytes: shard.DefaultMaxQueuedBytes,
		IndexCacheBytes:  server.DefaultIndexCacheBytes,
		PresenceBytes:    server.DefaultPresenceBudgetBytes,
		MaxMessageBytes:  server.DefaultMaxMessageBytes,
		MaxRecordBytes:   server.DefaultMaxRecordBytes,
	}
	fs := flag.NewFlagSet("rolloutd", flag.ContinueOnError)
	// The flag package prints nothing: a bad flag is returned as an error
	// (main prints it once, to stderr), and --help prints below, to out.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.Listen, "listen", ":50051", "`address` of the gRPC listener (RolloutService, grpc.health.v1, reflection)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", ":9090", "`address` of the HTTP listener for /metrics (Prometheus), and /debug/pprof/ with --pprof")
	fs.StringVar(&c.Store, "store", "./rolloutd-data", "where records are stored: a local `directory` (also file:///abs/path), or azblob://CONTAINER[/PREFIX] for Azure\n"+
		"Blob Storage, authenticated by "+envConnectionString+" (Azurite, development) or\n"+
		"by --azure-account-url with workload identity")
	fs.StringVar(&c.AzureAccountURL, "azure-account-url", "", "Azure Blob account `URL` (https://ACCOUNT.blob.core.windows.net/) for Microsoft Entra ID auth\n"+
		"(workload identity on AKS); default "+envAccountURL)
	fs.IntVar(&c.AzureMaxConns, "azure-max-conns", azure.DefaultMaxConns, "maximum concurrent requests to Azure, and the size of the one shared connection pool")
	fs.IntVar(&c.MaxWriters, "max-writers", server.DefaultMaxWriters, "maximum resident shard writers; the least recently used is evicted past it")
	fs.Var(&c.WriterQueueBytes, "writer-queue-bytes", "`bytes` of appends one shard writer may hold queued; past it Append fails ResourceExhausted (backpressure)")
	fs.Var(&c.IndexCacheBytes, "index-cache-bytes", "`bytes` of generation indexes cached for all shards, shared by writers and reads")
	fs.Var(&c.PresenceBytes, "presence-budget-bytes", "`bytes` that all shard writers together may hold to answer appends' id look-ups from memory; past it the least recently used writers look ids up through the index cache")
	fs.Var(&c.LocalBarrier, "local-barrier", "how the embedded store makes a group of writes durable, a `mode`: fsync (the default: each file and directory), or, on a file system\n"+
		"of rolloutd's own, auto (syncfs(2) from 4 files) or syncfs, which also write back other programs' dirty pages there")
	fs.BoolVar(&c.DisableMerge, "disable-merge", false, "turn off merging small generations and garbage collection (for debugging only)")
	fs.DurationVar(&c.CommitTimeout, "commit-timeout", shard.DefaultCommitTimeout, "how long one commit may take before the server gives up on it: its Append is then answered UNAVAILABLE (OUTCOME_UNKNOWN when the commit was sent), and a shard writer whose commit stays undecided is replaced")
	fs.StringVar(&c.CommitProtocol, "commit-protocol", "", "deprecated and ignored: v2 (commit by create) is the only commit `protocol`; v1 is refused. See docs/operations.md")
	fs.Var(&c.MaxMessageBytes, "max-message-bytes", "largest gRPC request in `bytes`; sized to the largest Append batch")
	fs.IntVar(&c.MaxBatchRecords, "max-batch-records", server.DefaultMaxBatchRecords, "maximum records in one Append")
	fs.Var(&c.MaxRecordBytes, "max-record-bytes", "largest encoded record in `bytes`; the default is the largest a default gRPC client (4 MiB receive limit) can read back. Raise clients' receive limit with it")
	fs.DurationVar(&c.DefaultDeadline, "default-deadline", server.DefaultDeadline, "deadline of RPCs whose client set none")
	fs.Var(&c.RequestBudgetBytes, "request-budget-bytes", "`bytes` of memory that requests in flight may hold: each is charged twice --max-message-bytes before its body is read,\n"+
		"then 4x its size once decoded, until it ends; one connection may hold a quarter, one client identity half.\n"+
		"Over it, requests fail RESOURCE_EXHAUSTED (reason BACKPRESSURE, with a RetryInfo). Default: 25% of GOMEMLIMIT or of\n"+
		"the cgroup memory limit, whichever is smaller; 1GiB without either")
	fs.DurationVar(&c.RecvTimeout, "recv-timeout", server.DefaultRecvTimeout, "time a request's message may take to arrive after its headers; a slower stream is cancelled (DEADLINE_EXCEEDED)")
	fs.DurationVar(&c.SendTimeout, "send-timeout", server.DefaultSendTimeout, "time a built response may wait for its client to take it; past it the server closes the client's connection,\n"+
		"ending every stream on it (behind an L7 proxy, other clients' streams too) and freeing the response")
	fs.DurationVar(&c.SubscribeWatchInterval, "subscribe-watch-interval", 5*time.Second, "how often each prefix that subscriptions read is listed, to find new shards and wake the readers of idle ones\n"+
		"whose writer is on another instance: about the latency of a parked shard's next record")
	fs.DurationVar(&c.SubscribeIdleAfter, "subscribe-idle-after", 30*time.Second, "a subscribed shard idle this long parks its reader: it stops polling the store until a commit on this\n"+
		"instance or the prefix's listing wakes it")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "budget for the whole shutdown on SIGTERM/SIGINT; rolloutd exits within it")
	fs.DurationVar(&c.DrainDelay, "drain-delay", 2*time.Second, "how long to keep serving after reporting NOT_SERVING on shutdown, so load balancers stop sending")
	fs.StringVar(&c.LogFormat, "log-format", "json", "log `format`: json or console")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	c.securityConfig.registerFlags(fs)
	printVersion := fs.Bool("version", false, "print the version, the commit and the Go version, then exit (as rolloutd version does)")
	restoreValues := explainParseErrors(fs)

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			restoreValues()
			printServeUsage(out, fs)
		} else {
			err = fmt.Errorf("%w (see rolloutd --help)", err)
		}
		return nil, err
	}
	if *printVersion {
		return nil, errPrintVersion
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: rolloutd serve takes flags only (see --help)", fs.Arg(0))
	}
	fs.VisitAll(func(f *flag.Flag) { c.flagNames = append(c.flagNames, f.Name) })
	if err := setFromEnv(fs, getenv); err != nil {
		return nil, err
	}
	if err := c.readEnv(getenv); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// printServeUsage writes serve's --help to out: what rolloutd is, its
// commands, and the flags of fs.
func printServeUsage(out io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(out, `rolloutd serves rollout.v1.RolloutService over gRPC and stores records durably
in blob storage: a local directory by default, or Azure Blob Storage.
Its RPCs: %s.
Every flag can also be set with the environment variable
%s<FLAG_IN_CAPS> (--max-writers: %sMAX_WRITERS); a flag wins over
its variable, which wins over the default. Tracing is configured by the
standard OpenTelemetry variables (OTEL_TRACES_EXPORTER=otlp or
OTEL_EXPORTER_OTLP_ENDPOINT turns it on; docs/operations.md, "Tracing").

Usage: rolloutd [serve] [flags]
       rolloutd COMMAND [flags]

Commands:
%s
Flags of serve:
`, serviceMethods(), envPrefix, envPrefix, commandList())
	fs.SetOutput(out)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// setFromEnv sets each flag of fs not given on the command line from its
// ROLLOUTD_* variable, if set.
func setFromEnv(fs *flag.FlagSet, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || envErr != nil {
			return
		}
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("invalid value %q for --%s (from %s): %w", v, f.Name, name, err)
			}
		}
	})
	return envErr
}

// readEnv reads what comes from the environment only, not from flags:
// the Azure credentials and endpoint, and the OTEL_* tracing settings.
func (c *config) readEnv(getenv func(string) string) error {
	if c.AzureAccountURL == "" {
		c.AzureAccountURL = getenv(envAccountURL)
	}
	c.azureConn = getenv(envConnectionString)
	if err := c.readConnectionStringFile(); err != nil {
		return err
	}
	tr, err := tracing.FromEnv(getenv)
	if err != nil {
		return err
	}
	c.tracing = tr
	return nil
}

// validate checks every value and derives the parsed forms. Each error
// names the flag.
func (c *config) validate() error {
	if err := checkCommitProtocol(c.CommitProtocol); err != nil {
		return err
	}
	for _, a := range []struct{ flag, addr string }{{"listen", c.Listen}, {"metrics-listen", c.MetricsListen}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("--%s %q: want host:port or :port: %w", a.flag, a.addr, err)
		}
	}
	if err := c.validateStore(); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		return fmt.Errorf("--log-format %q: want json or console", c.LogFormat)
	}
	lvl, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	c.logLevel = lvl
	return c.validateSecurity()
}

// validateStore checks --store and, for Azure, its credentials and
// connections, and derives c.store.
func (c *config) validateStore() error {
	loc, err := parseStore(c.Store)
	if err != nil {
		return fmt.Errorf("--store %q: %w", c.Store, err)
	}
	c.store = loc
	if loc.Container != "" {
		switch {
		case c.azureConn == "" && c.AzureAccountURL == "":
			return fmt.Errorf("--store %s needs credentials: set %s or --azure-connection-string-file (Azurite, development) or --azure-account-url / %s (workload identity)", c.Store, envConnectionString, envAccountURL)
		case c.azureConn != "" && c.AzureAccountURL != "":
			return fmt.Errorf("--azure-account-url %q and a connection string (%s or --azure-connection-string-file) are both set: set one (the account URL for workload identity, the connection string for Azurite or development)", c.AzureAccountURL, envConnectionString)
		case c.AzureAccountURL != "":
			u, err := url.Parse(c.AzureAccountURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return fmt.Errorf("--azure-account-url %q: want https://ACCOUNT.blob.core.windows.net/", c.AzureAccountURL)
			}
		}
		if c.AzureMaxConns < 1 {
			return fmt.Errorf("--azure-max-conns %d: must be at least 1", c.AzureMaxConns)
		}
		if c.LocalBarrier != localstore.BarrierFsync {
			return fmt.Errorf("--local-barrier %s: applies to the embedded store, not to --store %s", c.LocalBarrier, c.Store)
		}
	}
	return nil
}

// applyCaches sets the server's process-wide memory bounds, shared by all
// shards: the index cache and the presence budget.
func (c *config) applyCaches(s *server.Config) {
	s.IndexCacheBytes = int64(c.IndexCacheBytes)
	s.PresenceBudgetBytes = int64(c.PresenceBytes)
}

// validateLimits checks the sizes, counts and durations.
func (c *config) validateLimits() error {
	positive := []struct {
		flag string
		v    int64
	}{
		{"max-writers", int64(c.MaxWriters)},
		{"writer-queue-bytes", int64(c.WriterQueueBytes)},
		{"index-cache-bytes", int64(c.IndexCacheBytes)},
		{"presence-budget-bytes", int64(c.PresenceBytes)},
		{"max-message-bytes", int64(c.MaxMessageBytes)},
		{"max-batch-records", int64(c.MaxBatchRecords)},
		{"max-record-bytes", int64(c.MaxRecordBytes)},
		{"default-deadline", int64(c.DefaultDeadline)},
		{"commit-timeout", int64(c.CommitTimeout)},
		{"recv-timeout", int64(c.RecvTimeout)},
		{"send-timeout", int64(c.SendTimeout)},
		{"shutdown-timeout", int64(c.ShutdownTimeout)},
		{"subscribe-watch-interval", int64(c.SubscribeWatchInterval)},
		{"subscribe-idle-after", int64(c.SubscribeIdleAfter)},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("--%s: must be positive", p.flag)
		}
	}
	switch {
	case int64(c.MaxMessageBytes) > 2<<30-1:
		return fmt.Errorf("--max-message-bytes %s: at most 2GiB-1, gRPC's limit", c.MaxMessageBytes)
	case c.MaxRecordBytes > c.MaxMessageBytes:
		return fmt.Errorf("--max-record-bytes %s exceeds --max-message-bytes %s: no such record could be sent", c.MaxRecordBytes, c.MaxMessageBytes)
	case int64(c.budget()) < server.MinRequestBudget(int(c.MaxMessageBytes)):
		return fmt.Errorf("--request-budget-bytes %s is too small for --max-message-bytes %s: one connection may hold a quarter of the budget, and a request holds up to 4x its size decoded; raise the budget to at least %s, or lower the message limit",
			c.budget(), c.MaxMessageBytes, byteSize(server.MinRequestBudget(int(c.MaxMessageBytes))))
	case c.DrainDelay < 0:
		return fmt.Errorf("--drain-delay %s: must not be negative", c.DrainDelay)
	case c.DrainDelay >= c.ShutdownTimeout/2:
		return fmt.Errorf("--drain-delay %s must be under half of --shutdown-timeout %s, to leave time for in-flight appends and closing writers", c.DrainDelay, c.ShutdownTimeout)
	}
	return nil
}

// budget is --request-budget-bytes, or the server's default from the memory
// limit.
func (c *config) budget() byteSize {
	if c.RequestBudgetBytes > 0 {
		return c.RequestBudgetBytes
	}
	b, _ := server.DefaultRequestBudget()
	return byteSize(b)
}

// parseStore parses --store: azblob://CONTAINER[/PREFIX], file:///abs/path,
// or a local directory.
func parseStore(s string) (storeLocation, error) {
	switch {
	case s == "":
		return storeLocation{}, errors.New("must not be empty")
	case strings.HasPrefix(s, "azblob://"):
		container, prefix, _ := strings.Cut(strings.TrimPrefix(s, "azblob://"), "/")
		if err := azure.ValidateContainerName(container); err != nil {
			return storeLocation{}, err
		}
		return storeLocation{Container: container, Prefix: strings.TrimSuffix(prefix, "/")}, nil
	case strings.HasPrefix(s, "file://"):
		u, err := url.Parse(s)
		if err != nil {
			return storeLocation{}, err
		}
		if u.Host != "" && u.Host != "localhost" {
			return storeLocation{}, fmt.Errorf("file URL with host %q: want file:///abs/path", u.Host)
		}
		if !filepath.IsAbs(u.Path) {
			return storeLocation{}, errors.New("file URL path must be absolute: want file:///abs/path")
		}
		return storeLocation{Dir: filepath.Clean(u.Path)}, nil
	case strings.Contains(s, "://"):
		return storeLocation{}, errors.New("unknown scheme: want a directory, file:///abs/path or azblob://CONTAINER[/PREFIX]")
	}
	dir, err := filepath.Abs(s)
	if err != nil {
		return storeLocation{}, err
	}
	return storeLocation{Dir: dir}, nil
}

// byteSize is a flag value in bytes that also takes KiB, MiB and GiB
// suffixes: 65536, 64KiB, 64MiB, 1GiB.
type byteSize int64

func (b byteSize) String() string {
	n := int64(b)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	num := s
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = rest, u.size
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return errors.New("want a byte count such as 1048576, 64KiB, 64MiB or 1GiB")
	}
	*b = byteSize(n * mult)
	return nil
}
