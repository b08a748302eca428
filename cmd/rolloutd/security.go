package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/rolloutd/rolloutd/internal/authz"
	"github.com/rolloutd/rolloutd/internal/ratelimit"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/tlsreload"
)

// securityConfig is the part of the config about who may connect and what
// they may do: TLS, mTLS, the authorization policy, the health-only
// listener, the metrics listener's TLS, connection limits, the append rate
// limit, and where the Azure connection string comes from.
type securityConfig struct {
	TLSCert        string
	TLSKey         string
	TLSClientCA    string
	AuthzFile      string
	ReloadInterval time.Duration
	HealthListen   string
	MetricsTLS     string
	// MetricsClientIdentities are the identities (tagged: uri:, dns:,
	// cn:) a client certificate must have to reach the metrics listener
	// under --metrics-tls mtls; parsed from the flag by validateSecurity.
	MetricsClientIdentities []string
	Pprof                   bool

	MaxConcurrentStreams         int
	KeepaliveMinTime             time.Duration
	KeepalivePermitWithoutStream bool
	MaxConnectionAge             time.Duration
	MaxConnectionAgeGrace        time.Duration

	AppendRateLimit  byteSize
	AppendRateBurst  byteSize
	ListOpsRate      int
	ListOpsBurst     int
	ListOpsTotalRate int

	AzureConnectionStringFile string
}

// Values of --metrics-tls.
const (
	metricsTLSOff  = "off"
	metricsTLSOn   = "tls"
	metricsTLSMTLS = "mtls"
)

func (c *securityConfig) registerFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TLSCert, "tls-cert", "", "PEM certificate `file` (chain, leaf first) for TLS on --listen; reloaded when it changes. With --tls-key; without both, gRPC is plaintext")
	fs.StringVar(&c.TLSKey, "tls-key", "", "PEM private key `file` of --tls-cert; reloaded when it changes")
	fs.StringVar(&c.TLSClientCA, "tls-client-ca", "", "PEM `file` of the CAs client certificates must chain to: mutual TLS. A client's identity is its certificate's\n"+
		"first URI SAN (uri:spiffe://…), else first DNS SAN (dns:…), else CN (cn:…, granted only where the policy says cn:); reloaded when it changes")
	fs.StringVar(&c.AuthzFile, "authz-file", "", "YAML or JSON authorization policy `file`: which identities may "+authz.VerbList()+"\n"+
		"which shard prefixes; default deny. Needs --tls-client-ca. Reloaded when it changes; an invalid change is logged and ignored")
	fs.DurationVar(&c.ReloadInterval, "reload-interval", 10*time.Second, "how often the TLS files and the policy file are checked for changes")
	fs.StringVar(&c.HealthListen, "health-listen", "", "`address` of a plaintext listener serving only grpc.health.v1, for kubelet gRPC probes under mTLS (empty: none)")
	fs.StringVar(&c.MetricsTLS, "metrics-tls", metricsTLSOff, "serve --metrics-listen over TLS with --tls-cert: off, tls, or mtls (also require a client certificate from --tls-client-ca\n"+
		"with one of the --metrics-client-identity identities)")
	fs.Func("metrics-client-identity", "`identity` of a scraper allowed on --metrics-listen under --metrics-tls mtls (required there): uri:spiffe://…, dns:NAME or cn:NAME,\n"+
		"or an untagged URI (a URI SAN) or DNS name (a DNS SAN). Repeat the flag, or separate identities with commas", func(v string) error {
		for id := range strings.SplitSeq(v, ",") {
			c.MetricsClientIdentities = append(c.MetricsClientIdentities, strings.TrimSpace(id))
		}
		return nil
	})
	fs.BoolVar(&c.Pprof, "pprof", false, "serve the runtime profiles under /debug/pprof/ on --metrics-listen. Off by default: a profile shows the command line,\n"+
		"stacks and heap samples, and costs CPU, to anyone who reaches the port; with it, prefer --metrics-tls mtls or a loopback --metrics-listen")
	fs.IntVar(&c.MaxConcurrentStreams, "max-concurrent-streams", server.DefaultMaxConcurrentStreams, "maximum RPCs in flight on one client connection")
	fs.DurationVar(&c.KeepaliveMinTime, "keepalive-min-time", server.DefaultKeepaliveMinTime, "shortest interval at which clients may ping; a client that pings more often is disconnected")
	fs.BoolVar(&c.KeepalivePermitWithoutStream, "keepalive-permit-without-stream", true, "let clients ping (no more often than --keepalive-min-time) while they have no RPC in flight")
	fs.DurationVar(&c.MaxConnectionAge, "max-connection-age", server.DefaultMaxConnectionAge, "ask clients to reconnect after about this long, so load spreads over new instances (0: never)")
	fs.DurationVar(&c.MaxConnectionAgeGrace, "max-connection-age-grace", server.DefaultMaxConnectionAgeGrace, "time RPCs in flight get to finish after that; longer Scan streams are cut and resume from their cursor")
	fs.Var(&c.AppendRateLimit, "append-rate-limit", "`bytes` per second each client identity may append (by client address without mTLS); 0: no limit.\n"+
		"Over it, Append fails RESOURCE_EXHAUSTED with a google.rpc.RetryInfo delay")
	fs.Var(&c.AppendRateBurst, "append-rate-burst", "`bytes` an identity may append at once under --append-rate-limit (default: the larger of the limit and\n"+
		"--max-message-bytes, so that every batch the server accepts can pass)")
	fs.IntVar(&c.ListOpsRate, "list-ops-rate", 1000, "store `operations` per second each client's ListShards calls may cause, summaries included (by client\n"+
		"address without mTLS); a client in debt gets RESOURCE_EXHAUSTED with a google.rpc.RetryInfo delay. 0: no limit")
	fs.IntVar(&c.ListOpsBurst, "list-ops-burst", 2500, "store `operations` a client's listings may cause at once under --list-ops-rate; one page of 1,000\n"+
		"summaries costs 2,000 to 5,000 (a list, then a manifest read and log probes per shard)")
	fs.IntVar(&c.ListOpsTotalRate, "list-ops-total-rate", 2000, "store `operations` per second the ListShards calls of all clients together may cause (burst\n"+
		"--list-ops-burst), so that many listing clients cannot crowd out appends and gets. 0: no limit")
	fs.StringVar(&c.AzureConnectionStringFile, "azure-connection-string-file", "", "`file` holding the Azure Storage connection string (Azurite, development), as an alternative to\n"+
		envConnectionString+"; there is no flag for the string itself, since flags show in ps")
}

// validateSecurity checks the security flags. Each error names the flag.
func (c *config) validateSecurity() error {
	s := &c.securityConfig
	switch {
	case (s.TLSCert == "") != (s.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: set both, or neither for plaintext")
	case s.TLSClientCA != "" && s.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key: mutual TLS is TLS first")
	case s.AuthzFile != "" && s.TLSClientCA == "":
		return errors.New("--authz-file needs --tls-client-ca: the policy names identities, which come from client certificates")
	case s.ReloadInterval <= 0:
		return fmt.Errorf("--reload-interval %s: must be positive", s.ReloadInterval)
	case s.MaxConcurrentStreams < 1:
		return fmt.Errorf("--max-concurrent-streams %d: must be at least 1", s.MaxConcurrentStreams)
	case s.KeepaliveMinTime <= 0:
		return fmt.Errorf("--keepalive-min-time %s: must be positive", s.KeepaliveMinTime)
	case s.MaxConnectionAge < 0 || s.MaxConnectionAgeGrace <= 0:
		return errors.New("--max-connection-age must not be negative and --max-connection-age-grace must be positive")
	case s.AppendRateBurst > 0 && s.AppendRateLimit == 0:
		return errors.New("--append-rate-burst needs --append-rate-limit")
	case s.ListOpsRate < 0 || s.ListOpsTotalRate < 0 || ((s.ListOpsRate > 0 || s.ListOpsTotalRate > 0) && s.ListOpsBurst < 1):
		return errors.New("--list-ops-rate and --list-ops-total-rate must not be negative, and --list-ops-burst must be at least 1")
	}
	switch s.MetricsTLS {
	case metricsTLSOff:
	case metricsTLSOn, metricsTLSMTLS:
		if s.TLSCert == "" {
			return fmt.Errorf("--metrics-tls %s needs --tls-cert and --tls-key", s.MetricsTLS)
		}
		if s.MetricsTLS == metricsTLSMTLS && s.TLSClientCA == "" {
			return errors.New("--metrics-tls mtls needs --tls-client-ca")
		}
	default:
		return fmt.Errorf("--metrics-tls %q: want off, tls or mtls", s.MetricsTLS)
	}
	switch {
	case s.MetricsTLS == metricsTLSMTLS && len(s.MetricsClientIdentities) == 0:
		return errors.New("--metrics-tls mtls needs --metrics-client-identity: name the scraper (such as uri:spiffe://CLUSTER/ns/monitoring/sa/prometheus); " +
			"otherwise every certificate from --tls-client-ca, every client workload's, could read the metrics")
	case s.MetricsTLS != metricsTLSMTLS && len(s.MetricsClientIdentities) > 0:
		return errors.New("--metrics-client-identity needs --metrics-tls mtls: only then do scrapers present a certificate")
	}
	for i, id := range s.MetricsClientIdentities {
		tagged, err := authz.ParseIdentity(id)
		if err != nil {
			return fmt.Errorf("--metrics-client-identity: %w", err)
		}
		s.MetricsClientIdentities[i] = tagged
	}
	if s.HealthListen != "" {
		if _, _, err := net.SplitHostPort(s.HealthListen); err != nil {
			return fmt.Errorf("--health-listen %q: want host:port or :port: %w", s.HealthListen, err)
		}
	}
	if s.AppendRateLimit > 0 && s.AppendRateBurst == 0 {
		s.AppendRateBurst = max(s.AppendRateLimit, c.MaxMessageBytes)
	}
	return nil
}

// readConnectionStringFile reads --azure-connection-string-file into
// azureConn. Setting it and AZURE_STORAGE_CONNECTION_STRING is ambiguous.
// The string itself is never logged or put in an error.
func (c *config) readConnectionStringFile() error {
	f := c.AzureConnectionStringFile
	if f == "" {
		return nil
	}
	if c.azureConn != "" {
		return fmt.Errorf("--azure-connection-string-file and %s are both set: set one", envConnectionString)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("--azure-connection-string-file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return fmt.Errorf("--azure-connection-string-file %s: the file is empty", f)
	}
	c.azureConn = s
	return nil
}

// security is what the security flags build: TLS material and the policy,
// each reloaded from disk, and the rate limiter.
type security struct {
	cfg      *securityConfig
	tls      *tlsreload.Reloader // nil without --tls-cert
	authz    *authz.Authorizer   // nil without --authz-file
	limiter  *ratelimit.Limiter  // nil without --append-rate-limit
	listCost *ratelimit.Limiter  // nil with --list-ops-rate 0
	listAll  *ratelimit.Limiter  // nil with --list-ops-total-rate 0
	grpcOpts []grpc.ServerOption
}

// newSecurity loads the TLS files and the policy (failing on invalid ones:
// rolloutd never starts less protected than configured), starts watching
// them, and registers their metrics with reg. Close stops the watching.
func newSecurity(cfg *config, log *zap.Logger, reg prometheus.Registerer) (*security, error) {
	s := &security{cfg: &cfg.securityConfig}
	c := s.cfg
	if c.TLSCert != "" {
		r, err := tlsreload.New(tlsreload.Config{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA,
			Interval: c.ReloadInterval, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-client-ca: %w", err)
		}
		s.tls = r
		s.grpcOpts = append(s.grpcOpts, grpc.Creds(credentials.NewTLS(r.Config())))
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "rolloutd_tls_certificate_expiry_timestamp_seconds",
				Help: "When the serving certificate in force expires (Unix time).",
			}, func() float64 { return float64(r.NotAfter().Unix()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "rolloutd_tls_reload_failures_total",
				Help: "Changed TLS files that were rejected (the material in force stayed).",
			}, func() float64 { _, f := r.Stats(); return float64(f) }),
		)
	}
	if c.AuthzFile != "" {
		a, err := authz.Load(c.AuthzFile, c.ReloadInterval, log)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.authz = a
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rolloutd_authz_policy_reload_failures_total",
			Help: "Changed policy files that were rejected (the policy in force stayed).",
		}, func() float64 { _, f := a.Stats(); return float64(f) }))
	}
	if c.AppendRateLimit > 0 {
		l, err := ratelimit.New(float64(c.AppendRateLimit), int(c.AppendRateBurst))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--append-rate-limit: %w", err)
		}
		s.limiter = l
	}
	if c.ListOpsRate > 0 {
		l, err := ratelimit.NewCost("listing", "store ops", float64(c.ListOpsRate), c.ListOpsBurst)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--list-ops-rate: %w", err)
		}
		s.listCost = l
	}
	if c.ListOpsTotalRate > 0 {
		l, err := ratelimit.NewCost("listing (all clients)", "store ops", float64(c.ListOpsTotalRate), c.ListOpsBurst)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--list-ops-total-rate: %w", err)
		}
		s.listAll = l
	}
	log.Info("security",
		zap.Bool("tls", s.tls != nil), zap.Bool("mtls", c.TLSClientCA != ""), zap.String("authz_file", c.AuthzFile),
		zap.String("health_listen", c.HealthListen), zap.String("metrics_tls", c.MetricsTLS),
		zap.Strings("metrics_client_identities", c.MetricsClientIdentities), zap.Bool("pprof", c.Pprof),
		zap.Int64("append_rate_limit_bytes", int64(c.AppendRateLimit)), zap.Int64("append_rate_burst_bytes", int64(c.AppendRateBurst)),
		zap.Int("list_ops_rate", c.ListOpsRate), zap.Int("list_ops_burst", c.ListOpsBurst), zap.Int("list_ops_total_rate", c.ListOpsTotalRate))
	if s.tls == nil {
		log.Warn("gRPC is plaintext: anyone who reaches --listen can read and write every shard; set --tls-cert, --tls-key and --tls-client-ca outside development")
	}
	return s, nil
}

// apply sets the server's security and connection-limit options.
func (s *security) apply(sc *server.Config) {
	sc.Authorizer = s.authz
	if s.tls != nil && s.tls.MutualTLS() {
		sc.ClientCAs = s.tls
	}
	sc.AppendLimiter = s.limiter
	sc.ListLimiter = s.listCost
	sc.ListTotalLimiter = s.listAll
	sc.ServerOptions = append(sc.ServerOptions, s.grpcOpts...)
	sc.MaxConcurrentStreams = uint32(s.cfg.MaxConcurrentStreams)
	sc.KeepaliveMinTime = s.cfg.KeepaliveMinTime
	sc.KeepalivePermitWithoutStream = s.cfg.KeepalivePermitWithoutStream
	sc.MaxConnectionAge = s.cfg.MaxConnectionAge
	if sc.MaxConnectionAge == 0 {
		sc.MaxConnectionAge = -1 // the flag's 0 is never; the server's 0 is its default
	}
	sc.MaxConnectionAgeGrace = s.cfg.MaxConnectionAgeGrace
}

// metricsListener wraps the metrics listener in TLS when --metrics-tls
// asks for it (under mtls, admitting only the named scrapers), and warns
// when what it serves is open to anyone who reaches it: /debug/pprof/
// without client certificates, or plaintext metrics on an address other
// than loopback while gRPC is protected.
func (s *security) metricsListener(lis net.Listener, log *zap.Logger) net.Listener {
	addr := zap.String("addr", lis.Addr().String())
	if s.cfg.Pprof && s.cfg.MetricsTLS != metricsTLSMTLS {
		log.Warn("--pprof: /debug/pprof/ is served to anyone who reaches --metrics-listen, without a client certificate: profiles show the command line, stacks and heap samples; "+
			"bind --metrics-listen to 127.0.0.1, restrict it by network policy, or set --metrics-tls mtls", addr, zap.String("metrics_tls", s.cfg.MetricsTLS))
	}
	switch s.cfg.MetricsTLS {
	case metricsTLSOn:
		return tls.NewListener(lis, s.tls.ServerOnlyConfig())
	case metricsTLSMTLS:
		return tls.NewListener(lis, scraperConfig(s.tls.Config(), s.cfg.MetricsClientIdentities, log))
	}
	if s.tls != nil && !isLoopback(lis.Addr()) {
		log.Warn("metrics are served in plaintext on a non-loopback address; bind --metrics-listen to 127.0.0.1, restrict it by network policy, or set --metrics-tls", addr)
	}
	return lis
}

// scraperConfig is base (a reloading mTLS config) admitting only client
// certificates whose identity is one of identities (tagged forms). A
// certificate from the client CA with another identity fails the
// handshake, and is logged.
func scraperConfig(base *tls.Config, identities []string, log *zap.Logger) *tls.Config {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
			return errors.New("metrics: no verified client certificate")
		}
		id := authz.Identity(cs.VerifiedChains[0][0])
		if slices.Contains(identities, id) {
			return nil
		}
		log.Warn("metrics: refused a client certificate whose identity is not a --metrics-client-identity", zap.String("identity", id))
		return fmt.Errorf("metrics: identity %q is not a --metrics-client-identity", id)
	}
	return &tls.Config{
		MinVersion: base.MinVersion,
		// The material in force comes from base per handshake, so that
		// reloads apply; the identity check rides on top of it.
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c, err := base.GetConfigForClient(hello)
			if err != nil || c == nil {
				return c, err
			}
			c = c.Clone()
			c.VerifyConnection = verify
			return c, nil
		},
	}
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// Close stops watching the files.
func (s *security) Close() {
	if s.tls != nil {
		s.tls.Close()
	}
	if s.authz != nil {
		s.authz.Close()
	}
}
