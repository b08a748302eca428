package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/rolloutd/rolloutd/client"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/export"
	"github.com/rolloutd/rolloutd/internal/term"
	"github.com/rolloutd/rolloutd/internal/validate"
)

func init() {
	register(&command{
		name:    "export",
		summary: "export shards to Parquet files (Hive layout), incrementally and exactly once; see docs/export.md",
		run:     runExport,
	})
}

// partPutTimeout bounds one try of a part's put to Azure.
const partPutTimeout = 10 * time.Minute

// exportConfig is what export's flags say.
type exportConfig struct {
	Store, Server, Prefix, Out, State string
	Shards                            []string
	RowsPerFile                       int
	Compression                       string
	JSON                              bool
	Progress                          string

	AzureAccountURL, AzureConnFile string
	AzureMaxConns                  int
	TLS                            bool
	TLSCA, TLSCert, TLSKey         string
	TLSServerName                  string

	azureConn string
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func parseExportConfig(args []string, getenv func(string) string, out io.Writer) (*exportConfig, error) {
	c := &exportConfig{}
	fs := flag.NewFlagSet("rolloutd export", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.Store, "store", "", "read storage directly: a local `directory` (not held by a running rolloutd), file:///abs/path, or azblob://CONTAINER[/PREFIX]")
	fs.StringVar(&c.Server, "server", "", "read through a running rolloutd's ListShards and Scan at this gRPC `address` (host:port) instead; without --store, default $"+envAddr)
	fs.Var((*stringList)(&c.Shards), "shard", "with --server: export only this `shard` (repeat the flag), which must exist; --prefix is then not needed")
	fs.StringVar(&c.Prefix, "prefix", "", "export the shards under this `prefix`, on whole '/'-separated segments (\"demo\" is demo and demo/*, not demo2); omitted or empty, every shard")
	fs.StringVar(&c.Out, "out", "", "where parts go: a local `directory`, or azblob://CONTAINER[/PREFIX] (required)")
	fs.StringVar(&c.State, "since-state", "", "a local JSON `file` caching each shard's last exported seq (the published parts always win over it)")
	fs.IntVar(&c.RowsPerFile, "rows-per-file", export.DefaultRowsPerFile, "most records in one part; with an azblob --out a part is held in memory, so this bounds memory")
	fs.StringVar(&c.Compression, "compression", "zstd", "column compression: zstd, snappy or none")
	fs.BoolVar(&c.JSON, "json", false, "write the summary as JSON to stdout")
	fs.StringVar(&c.Progress, "progress", "auto", "live progress on stderr: auto (a line per shard, on a terminal only), plain (a line per finished shard), off")
	fs.StringVar(&c.AzureAccountURL, "azure-account-url", "", "Azure Blob account `URL` for Microsoft Entra ID auth (workload identity); default "+envAccountURL)
	fs.StringVar(&c.AzureConnFile, "azure-connection-string-file", "", "read the Azure connection string from this `file` instead of "+envConnectionString)
	fs.IntVar(&c.AzureMaxConns, "azure-max-conns", azure.DefaultMaxConns, "maximum concurrent requests to Azure")
	fs.BoolVar(&c.TLS, "tls", false, "with --server: connect over TLS, trusting the system's CAs unless --tls-ca")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "with --server: PEM `file` of the CAs that verify the server (implies --tls)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "with --server: PEM `file` of the client certificate, for mTLS (with --tls-key)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "with --server: PEM `file` of the client key, for mTLS")
	fs.StringVar(&c.TLSServerName, "tls-server-name", "", "with --server: the `name` to verify the server's certificate against, when it differs from the address")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(out, `rolloutd export writes shards' records to Parquet, one Hive-style directory per
shard: DEST/shard=<url-escaped shard>/part-<first_seq>-<last_seq>.parquet. A
rerun exports only what was committed since; a crash at any point, then a
rerun, leaves each record in exactly one part. See docs/export.md.

Usage: rolloutd export (--store S | --server ADDR [--shard SH]...) [--prefix P] --out DEST
           [--since-state FILE] [--rows-per-file N] [--compression zstd|snappy|none] [--json]

A selection that matches no shard (a --shard that does not exist, a
--prefix with no shard under it) is an error, never an empty export.

Azure credentials, for an azblob:// --store or --out, come from
`+envConnectionString+` (or --azure-connection-string-file), or
--azure-account-url with workload identity, as for rolloutd serve.

Flags:
`)
			fs.SetOutput(out)
			fs.PrintDefaults()
			return nil, flag.ErrHelp
		}
		return nil, fmt.Errorf("%w (see rolloutd export --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: rolloutd export takes flags only (see --help)", fs.Arg(0))
	}
	if c.Server == "" && c.Store == "" {
		c.Server = getenv(envAddr) // --store, or --server, wins over it
	}
	if c.AzureAccountURL == "" {
		c.AzureAccountURL = getenv(envAccountURL)
	}
	c.azureConn = getenv(envConnectionString)
	if c.AzureConnFile != "" {
		cc := &config{azureConn: c.azureConn}
		cc.AzureConnectionStringFile = c.AzureConnFile
		if err := cc.readConnectionStringFile(); err != nil {
			return nil, err
		}
		c.azureConn = cc.azureConn
	}
	return c, c.validate()
}

func (c *exportConfig) validate() error {
	switch {
	case (c.Store == "") == (c.Server == ""):
		return errors.New("give one of --store (read storage directly) and --server (read through a running rolloutd)")
	case c.Server == "" && len(c.Shards) > 0:
		return errors.New("--shard goes with --server; with --store every shard under --prefix is exported")
	case c.Out == "":
		return errors.New("--out is required: a directory or azblob://CONTAINER[/PREFIX]")
	case c.RowsPerFile < 1:
		return errors.New("--rows-per-file: must be at least 1")
	}
	p, err := parsePrefix("export", c.Prefix, "omit --prefix to export every shard")
	if err != nil {
		return err
	}
	c.Prefix = p
	for _, sh := range c.Shards {
		if err := validate.Shard(sh); err != nil {
			return fmt.Errorf("--shard %q: %v", sh, err)
		}
		if !validate.Covers(c.Prefix, sh) {
			return fmt.Errorf("--shard %q is not under --prefix %q: give --shard alone, or a --prefix that covers it", sh, c.Prefix)
		}
	}
	switch c.Compression {
	case "zstd", "snappy", "none":
	default:
		return fmt.Errorf("--compression %q: want zstd, snappy or none", c.Compression)
	}
	switch c.Progress {
	case "auto", "plain", "off":
	default:
		return fmt.Errorf("--progress %q: want auto, plain or off", c.Progress)
	}
	return nil
}

func runExport(args []string, stdout, stderr io.Writer) error {
	c, err := parseExportConfig(args, os.Getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(export.GCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return exportMain(ctx, c, stdout, stderr)
}

// azureStore opens location with the export's Azure flags.
// A source (--store) is only read: its container must exist, and is
// never created.
func (c *exportConfig) azureStore(ctx context.Context, flagName, raw string, loc storeLocation, tryTimeout time.Duration) (*azure.Store, error) {
	switch {
	case c.azureConn == "" && c.AzureAccountURL == "":
		return nil, fmt.Errorf("--%s %s needs credentials: set %s or --azure-connection-string-file, or --azure-account-url / %s (workload identity)", flagName, raw, envConnectionString, envAccountURL)
	case c.azureConn != "" && c.AzureAccountURL != "":
		return nil, fmt.Errorf("--azure-account-url and a connection string are both set: set one")
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	s, err := azure.New(ctx, azure.Config{
		Container:        loc.Container,
		Prefix:           loc.Prefix,
		MustExist:        flagName == "store",
		ConnectionString: c.azureConn,
		AccountURL:       c.AzureAccountURL,
		MaxConns:         c.AzureMaxConns,
		TryTimeout:       tryTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flagName, raw, err)
	}
	return s, nil
}

func exportMain(ctx context.Context, c *exportConfig, stdout, stderr io.Writer) error {
	opts := export.Options{
		Prefix:      c.Prefix,
		RowsPerFile: c.RowsPerFile,
		Compression: export.Compression(c.Compression),
		StatePath:   c.State,
	}
	src, list, closeSource, err := c.openSource(ctx)
	if err != nil {
		return err
	}
	defer closeSource()
	opts.Source = src
	dest, closeDest, err := c.openDest(ctx)
	if err != nil {
		return err
	}
	defer closeDest()
	opts.Dest = dest
	log, err := buildLogger("json", zapcore.InfoLevel)
	if err != nil {
		return err
	}
	opts.Logger = log
	p := newExportProgress(stderr, c.Progress)
	opts.Progress = p.update
	sum, runErr := export.Run(ctx, opts)
	p.end()
	if errors.Is(runErr, export.ErrNoShards) {
		return noShardsError(ctx, c, list, runErr)
	}
	if sum != nil {
		if c.JSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(sum); err != nil {
				return err
			}
		} else {
			printSummary(stderr, sum)
		}
	}
	return runErr
}

// openSource opens what export reads: a running rolloutd (--server) or
// the storage itself (--store). list lists its shards, for the hint when
// nothing matches; closeSource closes it.
func (c *exportConfig) openSource(ctx context.Context) (src export.Source, list shardLister, closeSource func(), err error) {
	if c.Server != "" {
		var copts []client.Option
		if c.TLS || c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != "" || c.TLSServerName != "" {
			copts = append(copts, client.WithTLS(client.TLSConfig{CAFile: c.TLSCA, CertFile: c.TLSCert, KeyFile: c.TLSKey, ServerName: c.TLSServerName}))
		}
		cl, err := client.New(c.Server, copts...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--server %s: %w", c.Server, err)
		}
		return &export.ClientSource{Client: cl, ShardNames: c.Shards}, clientLister(cl), func() { cl.Close() }, nil
	}
	loc, err := parseStore(c.Store)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--store %q: %w", c.Store, err)
	}
	if loc.Container != "" {
		s, err := c.azureStore(ctx, "store", c.Store, loc, 0)
		if err != nil {
			return nil, nil, nil, err
		}
		return export.NewStoreSource(s), storeLister(s), func() { s.Close() }, nil
	}
	if _, err := os.Stat(filepath.Join(loc.Dir, "FORMAT")); err != nil {
		return nil, nil, nil, fmt.Errorf("--store %s: not a rolloutd data directory: %w", c.Store, err)
	}
	s, err := localstore.Open(loc.Dir)
	if errors.Is(err, localstore.ErrLocked) {
		return nil, nil, nil, fmt.Errorf("--store %s: a running rolloutd holds the directory, and only it knows which of its blobs are durable: "+
			"export through it with --server ADDR instead (%w)", c.Store, err)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--store %s: %w", c.Store, err)
	}
	return export.NewStoreSource(s), storeLister(s), func() { s.Close() }, nil
}

// openDest opens where export writes, --out: a local directory or Azure.
func (c *exportConfig) openDest(ctx context.Context) (export.Dest, func(), error) {
	out, err := parseStore(c.Out)
	if err != nil {
		return nil, nil, fmt.Errorf("--out %q: %w", c.Out, err)
	}
	if out.Container == "" {
		d, err := export.OpenDir(out.Dir)
		if err != nil {
			return nil, nil, fmt.Errorf("--out %s: %w", c.Out, err)
		}
		return d, func() { d.Close() }, nil
	}
	// A part is one put of up to hundreds of MB: the store's default
	// try timeout (10 s) is sized for generations and manifests.
	s, err := c.azureStore(ctx, "out", c.Out, out, partPutTimeout)
	if err != nil {
		return nil, nil, err
	}
	return &export.BlobDest{Store: s, Name: out.String() + "/"}, func() { s.Close() }, nil
}

// exportProgress shows each shard's records and MB/s: on a terminal, a
// line per shard rewritten in place while it runs; otherwise (with plain)
// one line when it ends.
type exportProgress struct {
	mu   sync.Mutex
	w    io.Writer
	tty  bool
	off  bool
	last time.Time
}

func newExportProgress(w io.Writer, mode string) *exportProgress {
	p := &exportProgress{w: w, off: mode == "off"}
	if mode == "auto" {
		p.tty = term.IsTerminal(w)
		p.off = !p.tty
	}
	return p
}

func (p *exportProgress) update(pr export.Progress) {
	if p.off {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !pr.Done && (!p.tty || time.Since(p.last) < 200*time.Millisecond) {
		return
	}
	p.last = time.Now()
	mbs := 0.0
	if s := pr.Elapsed.Seconds(); s > 0 {
		mbs = float64(pr.Bytes) / 1e6 / s
	}
	line := fmt.Sprintf("%s: %d records, %.1f MB/s", pr.Shard, pr.Records, mbs)
	switch {
	case p.tty && pr.Done:
		fmt.Fprintf(p.w, "\r\x1b[K%s, done\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r\x1b[K%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

func (p *exportProgress) end() {}

// noShardsError is err, a selection that matched nothing, with what
// exists near what was asked.
func noShardsError(ctx context.Context, c *exportConfig, list shardLister, err error) error {
	var se *export.SelectionError
	if !errors.As(err, &se) {
		return fmt.Errorf("export: %w", err)
	}
	hint := ""
	switch {
	case len(se.Missing) == 1:
		if h, herr := findHint(ctx, list, se.Missing[0]); herr == nil {
			hint = h.shardHint(se.Missing[0], "--prefix")
		}
	case len(se.Missing) == 0 && se.Prefix != "":
		if h, herr := findHint(ctx, list, se.Prefix); herr == nil {
			hint = h.prefixHint()
		}
	}
	return fmt.Errorf("export: %w%s", err, hint)
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func printSummary(w io.Writer, s *export.Summary) {
	counts := map[string]int{}
	for _, r := range s.Shards {
		counts[r.Status]++
		switch {
		case r.Error != "":
			fmt.Fprintf(w, "%s: FAILED: %s\n", r.Shard, r.Error)
		case r.Status == export.StatusGone:
			fmt.Fprintf(w, "%s: gone (%s)\n", r.Shard, r.Note)
		case r.Note != "":
			fmt.Fprintf(w, "%s: %s\n", r.Shard, r.Note)
		}
	}
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	// Shards read, whether or not they held new records; gone ones were not.
	read := counts[export.StatusExported] + counts[export.StatusUpToDate]
	fmt.Fprintf(w, "exported %s from %s in %s to %s in %.1fs (%.1f MB/s); shards: %s\n",
		plural(int(s.Records), "record"), plural(read, "shard"), plural(s.Parts, "part"), s.Dest, s.Seconds, float64(s.RecordBytes)/1e6/max(s.Seconds, 1e-9), strings.Join(parts, ", "))
}
