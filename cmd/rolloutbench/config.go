package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/server"
)

// Modes a run can measure. "resident" is the product path over gRPC (an
// in-process server on loopback, or --target); "resident-shard" calls a
// resident shard.Writer directly, in-process, without gRPC; "floor-fs" is
// the embedded local store's floor: its file writes, fsyncs and renames in
// a plain loop, beside the store's directory. "floor1" and "floor1-fs" are
// the one-write floors of a commit by create (issue 21): the generation's
// create-only write alone, without the manifest's.
const (
	modeFloor         = "floor"
	modeFloor1        = "floor1"
	modeFloorFS       = "floor-fs"
	modeFloor1FS      = "floor1-fs"
	modeResident      = "resident"
	modeResidentShard = "resident-shard"
	modePerAppend     = "per-append"
)

var allModes = []string{modeFloor, modeFloor1, modeFloorFS, modeFloor1FS, modeResident, modeResidentShard, modePerAppend}

const envConnectionString = "AZURE_STORAGE_CONNECTION_STRING"

// config is everything a run is configured with.
type config struct {
	// Where the product path runs.
	Target     string // a running rolloutd's gRPC address
	TargetTLS  bool
	TargetCA   string
	MetricsURL string // the target's /metrics; derived from Target when empty
	GetTarget  string // "another instance" for --compare's Get target
	InProcess  bool

	// The blob store: needed in-process, and for floor and per-append.
	Store         string
	Azurite       string // "", "http" or "https"
	AzureMaxConns int
	MaxWriters    int

	// One load, run in each of Modes.
	Modes        []string
	Concurrency  int
	Shards       int
	Records      int
	RecordBytes  int
	Count        int64
	Duration     time.Duration
	ReadFraction float64

	Compare bool
	Targets []string // --targets: which of "1".."6" --compare runs; empty: all
	// Diagnose adds diagnostic phases (merging off) to target 1 in-process.
	Diagnose bool
	sizes    compareSizes

	// Target 7 (issue 32): rolloutd as a process of its own.
	RolloutdBin    string // the binary (A); "" builds ./cmd/rolloutd once
	RolloutdBinB   string // a second binary (B), measured alternating with A
	RolloutdArgs   string // extra flags for every rolloutd child, space-separated
	T7Azurite      bool   // run target 7's Azurite loads
	T7Dir          string // parent of its embedded stores and floors ("" = $TMPDIR)
	T7Pprof        string // CPU profile of rolloutd under the embedded wide load, to this file
	T7PprofSeconds int

	// Target 8 (issue 33): which parts run (latency, idle, fanout,
	// throughput), comma-separated.
	T8Parts string

	JSON       string
	CPUProfile string
	MemProfile string // heap profiles at RSS samples, by path prefix
	Trace      string
	Progress   string // auto, plain, off
	Verbose    bool

	// Derived by validate.
	store     storeURL
	azureConn string // from the environment or Azurite; never printed

	// relabel, when set (tests), renames every phase: the targets' rows
	// read typed results, so a phase's name is for display only.
	relabel func(string) string
}

// compareSizes sizes the phases of --compare. The defaults are the figures
// of docs/performance.md's targets table; the smoke test shrinks them.
type compareSizes struct {
	SingleAppends  int           // target 1: appends per mode, single client
	PerAppendOps   int           // target 1: per-append appends (each mode)
	ManyAppends    int64         // target 2: appends, 32 clients over 32 shards
	ManyClients    int           // target 2
	PerAppendCap   time.Duration // target 2: bound on the per-append phase's wall time
	OneShardSingle int           // target 3: single-client appends
	OneShardEach   int           // target 3: appends per client, 64 clients
	OneShardConc   int           // target 3: 64
	WideDuration   time.Duration // target 4
	WideShards     int           // target 4: 1000
	WideMaxWriters int           // target 4: 128
	WideClients    int           // target 4: 32
	Settle         time.Duration // target 2: socket sampling after the last append (Azurite's keep-alive is 5 s)
	Gets           int           // target 5: Gets (and read floors)
	GetRecords     int           // target 5: records in the read shard
	LocalSingle    int           // target 6: single-client appends (floor-fs and resident each)
	LocalClients   int           // target 6: 64
	LocalShards    int           // target 6: 100
	LocalEach      int           // target 6: appends per client in each layout
	// Target 5's scale rows: Gets on a shard of GetBigRecords records
	// against one of GetSmallRecords, both filled with GetFillBatch records
	// of GetFillBytes content per append.
	GetBigRecords   int
	GetSmallRecords int
	GetFillBatch    int
	GetFillBytes    int
	// Target 7: T7Clients clients over T7Shards shards and on one shard,
	// T7Each appends each per window (T7AzEach on Azurite); T7Single
	// single-client appends (and floor operations) per round; T7Rounds
	// rounds, of which the rows are medians.
	T7Clients, T7Shards, T7Each, T7AzEach, T7Single, T7Rounds int
	// T7Idle: how long the server's idle CPU is read before a stretch.
	T7Idle time.Duration
	// Target 8 (issue 33, Subscribe): T8Rounds rounds of T8LatAppends
	// appends to each latency shard; T8Shards shards of which T8Busy busy,
	// measured idle for T8IdleWindow with and without a subscription;
	// T8FanSubs subscribers over T8FanShards busy shards appended at
	// T8FanRate appends/s, for T8FanWindow each; a backlog of T8Backlog
	// 1 KiB records in T8BacklogShards shards, drained T8Rounds times each
	// way.
	T8Rounds, T8LatAppends, T8Shards, T8Busy, T8FanShards, T8FanSubs, T8FanRate, T8Backlog, T8BacklogShards int
	T8IdleWindow, T8FanWindow                                                                               time.Duration
	// T8IdleAfter, when positive, is the in-process rolloutd's
	// --subscribe-idle-after for the idle-cost rows (0: rolloutd's
	// default, 30 s): the window starts once the idle shards' readers
	// had that long (and a watch interval) to park.
	T8IdleAfter time.Duration
	// Quiesce: how long target 1 (after its interleaved blocks) and
	// target 3 (after each resident block) wait for the writers'
	// background work before reading the blob counters.
	Quiesce time.Duration
}

var defaultSizes = compareSizes{
	SingleAppends:  300,
	PerAppendOps:   100,
	ManyAppends:    5000,
	ManyClients:    32,
	PerAppendCap:   50 * time.Second,
	OneShardSingle: 200,
	OneShardEach:   40,
	OneShardConc:   64,
	WideDuration:   40 * time.Second,
	WideShards:     1000,
	WideMaxWriters: 128,
	WideClients:    32,
	Gets:           300,
	GetRecords:     500,
	Settle:         7 * time.Second,
	LocalSingle:    300,
	LocalClients:   64,
	LocalShards:    100,
	LocalEach:      120,
	T7Clients:      64,
	T7Shards:       100,
	T7Each:         100,
	T7AzEach:       60,
	T7Single:       300,
	T7Rounds:       3,
	T7Idle:         time.Second,

	GetBigRecords:   100_000,
	GetSmallRecords: 100,
	GetFillBatch:    10,
	GetFillBytes:    100,
	Quiesce:         time.Second,

	T8Rounds:        3,
	T8LatAppends:    30,
	T8Shards:        1000,
	T8Busy:          10,
	T8IdleWindow:    30 * time.Second,
	T8FanShards:     100,
	T8FanSubs:       50,
	T8FanRate:       100,
	T8FanWindow:     10 * time.Second,
	T8Backlog:       200_000,
	T8BacklogShards: 20,
}

// storeURL is a parsed --store.
type storeURL struct {
	Kind      string // "mem", "local", "azblob"
	Dir       string // local: directory ("" = a temporary one)
	Container string // azblob
	Prefix    string // azblob
}

func (s storeURL) String() string {
	switch s.Kind {
	case "mem":
		return "mem://"
	case "local":
		if s.Dir == "" {
			return "file://(temporary directory)"
		}
		return "file://" + s.Dir
	}
	return "azblob://" + strings.TrimSuffix(s.Container+"/"+s.Prefix, "/")
}

const usageHead = `rolloutbench measures rolloutd against its floor and against the
writer-per-append design it replaces, in one run.

Usage:
  rolloutbench --inprocess [--azurite https] --compare [--json out.json]
  rolloutbench --target host:50051 [--store azblob://c] --mode resident,floor ...
  rolloutbench --inprocess --store DIR --mode floor,resident,per-append --concurrency 8 --count 2000

--compare runs the five targets of docs/performance.md back to back and prints
their ratios. Otherwise each --mode runs the same load (--concurrency,
--shards, --records, --record-bytes, --count or --duration, --read-fraction)
and the table compares them. Azure credentials come from
AZURE_STORAGE_CONNECTION_STRING (or from the Azurite that --azurite starts).

Flags:
`

// parseConfig parses args (without the program name) into a validated
// config. getenv reads the environment. It writes usage to out for --help
// and returns flag.ErrHelp then.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (*config, error) {
	c := &config{sizes: defaultSizes}
	fs := flag.NewFlagSet("rolloutbench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageHead)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Target, "target", "", "gRPC address of a running rolloutd to measure (host:port)")
	fs.BoolVar(&c.TargetTLS, "target-tls", false, "connect to --target (and --get-target) over TLS")
	fs.StringVar(&c.TargetCA, "target-ca", "", "PEM file of CAs to trust for --target-tls (default: the system's)")
	fs.StringVar(&c.MetricsURL, "metrics-url", "", "the target's Prometheus endpoint (default http://TARGET-HOST:9090/metrics)")
	fs.StringVar(&c.GetTarget, "get-target", "", "another rolloutd serving the same store, for --compare's cross-instance Get (default --target)")
	fs.BoolVar(&c.InProcess, "inprocess", false, "run rolloutd in this process, on --store")
	fs.StringVar(&c.Store, "store", "", "blob store: mem://, a directory or file:///abs/dir (embedded local store), or azblob://CONTAINER[/PREFIX]\n"+
		"(default: azblob://rolloutbench with --azurite, else a temporary directory)")
	fs.StringVar(&c.Azurite, "azurite", "", "start Azurite for this run: http, or https (a runtime self-signed RSA-2048 certificate)")
	fs.IntVar(&c.AzureMaxConns, "azure-max-conns", azure.DefaultMaxConns, "connection pool size of the shared Azure client (in-process)")
	fs.IntVar(&c.MaxWriters, "max-writers", server.DefaultMaxWriters, "resident shard writers of the in-process server (its LRU)")
	mode := fs.String("mode", modeResident, "comma-separated modes: "+strings.Join(allModes, ", "))
	fs.IntVar(&c.Concurrency, "concurrency", 1, "concurrent clients")
	fs.IntVar(&c.Shards, "shards", 1, "shards the clients append to")
	fs.IntVar(&c.Records, "records", 1, "records per append")
	fs.IntVar(&c.RecordBytes, "record-bytes", 1024, "content bytes per record")
	fs.Int64Var(&c.Count, "count", 1000, "operations per mode (appends and gets), unless --duration is set")
	fs.DurationVar(&c.Duration, "duration", 0, "run each mode this long instead of --count operations")
	fs.Float64Var(&c.ReadFraction, "read-fraction", 0, "fraction of operations that are Gets of ids this run appended (0..1)")
	fs.BoolVar(&c.Compare, "compare", false, "run the targets' phases (floor, resident, per-append) back to back and print their ratios")
	targets := fs.String("targets", strings.Join(targetIDs(), ","), "--compare: which targets to run (6 needs the embedded local store; 7 runs rolloutd processes, and Azurites, of its own)")
	fs.BoolVar(&c.Diagnose, "diagnose", true, "--compare in-process: also run target 1 with merging off, to show what merging costs a lone client")
	fs.IntVar(&c.sizes.SingleAppends, "compare-single", defaultSizes.SingleAppends, "--compare: single-client appends per mode (target 1)")
	fs.Int64Var(&c.sizes.ManyAppends, "compare-appends", defaultSizes.ManyAppends, "--compare: appends of the 32-client phases (target 2)")
	fs.DurationVar(&c.sizes.WideDuration, "compare-wide-duration", defaultSizes.WideDuration, "--compare: length of the 1,000-shard phase (target 4)")
	fs.IntVar(&c.sizes.Gets, "compare-gets", defaultSizes.Gets, "--compare: Gets and read floors (target 5)")
	fs.DurationVar(&c.sizes.PerAppendCap, "compare-per-append-cap", defaultSizes.PerAppendCap, "--compare: wall-time bound of the 32-client per-append phase (TIME_WAIT lasts 60 s)")
	c.registerT7Flags(fs)
	c.registerT8Flags(fs)
	fs.StringVar(&c.JSON, "json", "", "also write the figures to this file as JSON")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of this process (bench, and rolloutd when in-process) to this file")
	fs.StringVar(&c.MemProfile, "memprofile", "", "write heap profiles (after a forced GC) to FILE.PHASE.quarter and FILE.PHASE.end when RSS is sampled;\n"+
		"each is taken just after the RSS reading it accompanies and notes the live heap, the blob cache and VmRSS after debug.FreeOSMemory")
	fs.StringVar(&c.Trace, "trace", "", "write an execution trace of this process to this file (go tool trace; -pprof=sched shows time spent waiting for a CPU)")
	fs.StringVar(&c.Progress, "progress", "auto", "live progress: auto (an updating line on a terminal, plain lines otherwise), plain, off")
	fs.BoolVar(&c.Verbose, "v", false, "log rolloutd's (in-process) warnings to stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for t := range strings.SplitSeq(*targets, ",") {
		switch t = strings.TrimSpace(t); {
		case t == "":
		case slices.Contains(targetIDs(), t):
			c.Targets = append(c.Targets, t)
		default:
			return nil, fmt.Errorf("--targets: %q is not one of %s", t, strings.Join(targetIDs(), ", "))
		}
	}
	for m := range strings.SplitSeq(*mode, ",") {
		if m = strings.TrimSpace(m); m != "" {
			c.Modes = append(c.Modes, m)
		}
	}
	if err := c.validate(getenv); err != nil {
		return nil, err
	}
	return c, nil
}

// registerT7Flags adds target 7's flags (issue 32: rolloutd's own CPU per
// append, as a process of its own).
func (c *config) registerT7Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.RolloutdBin, "rolloutd-bin", "", "target 7: the rolloutd binary to run as a process of its own (default: build ./cmd/rolloutd once into a temporary directory)")
	fs.StringVar(&c.RolloutdBinB, "rolloutd-bin-b", "", "target 7: a second rolloutd binary (the candidate, \"after\"), measured alternating with --rolloutd-bin (the baseline)\n"+
		"round by round; the rows then judge this one and every figure gets its after/before ratio")
	fs.StringVar(&c.RolloutdArgs, "rolloutd-args", "", "target 7: extra flags for every rolloutd it starts, space-separated (e.g. \"--log-level warn\")")
	fs.BoolVar(&c.T7Azurite, "t7-azurite", true, "target 7: also run its Azurite loads (an Azurite over HTTP of its own per round)")
	fs.StringVar(&c.T7Dir, "t7-dir", "", "target 7: parent directory of its embedded stores and local floors, on the disk to measure (default $TMPDIR)")
	fs.StringVar(&c.T7Pprof, "t7-pprof", "", "target 7: after its rounds, profile rolloutd (--pprof) under the embedded wide load into this `file`\n"+
		"(FILE.b for --rolloutd-bin-b) and print go tool pprof -top's first 10")
	fs.IntVar(&c.T7PprofSeconds, "t7-pprof-seconds", 10, "target 7: length of the --t7-pprof profile")
	fs.IntVar(&c.sizes.T7Rounds, "t7-rounds", defaultSizes.T7Rounds, "target 7: rounds (its rows are their medians)")
	fs.IntVar(&c.sizes.T7Each, "t7-each", defaultSizes.T7Each, "target 7: appends per client in each embedded 64-client window")
	fs.IntVar(&c.sizes.T7Single, "t7-single", defaultSizes.T7Single, "target 7: single-client appends (and floor operations) per round")
}

// registerT8Flags adds target 8's flags (issue 33: Subscribe).
func (c *config) registerT8Flags(fs *flag.FlagSet) {
	fs.IntVar(&c.sizes.T8Rounds, "t8-rounds", defaultSizes.T8Rounds, "target 8: rounds of its timed figures (latency, throughput; the rows are medians)")
	fs.IntVar(&c.sizes.T8Shards, "t8-shards", defaultSizes.T8Shards, "target 8: shards of the idle-cost subscription (of which 10 busy)")
	fs.DurationVar(&c.sizes.T8IdleWindow, "t8-idle-window", defaultSizes.T8IdleWindow, "target 8: length of each idle-cost window (without, then with the subscription)")
	fs.DurationVar(&c.sizes.T8FanWindow, "t8-fan-window", defaultSizes.T8FanWindow, "target 8: length of each fan-out window (0, 1 and 50 subscribers)")
	fs.DurationVar(&c.sizes.T8IdleAfter, "t8-idle-after", 0, "target 8: --subscribe-idle-after of the idle-cost rolloutd (default rolloutd's, 30 s); the window waits for the idle readers to park")
	fs.StringVar(&c.T8Parts, "t8-parts", "latency,idle,fanout,throughput", "target 8: which of its parts to run (each part's rows are not measured otherwise)")
	fs.IntVar(&c.sizes.T8Backlog, "t8-backlog", defaultSizes.T8Backlog, "target 8: records (1 KiB) of the backlog the throughput rows drain")
}

// validate checks the flags against each other and derives the store and
// the target's metrics URL.
func (c *config) validate(getenv func(string) string) error {
	if err := c.validateFlags(); err != nil {
		return err
	}
	if err := c.resolveStore(getenv); err != nil {
		return err
	}
	return c.validateStoreUse()
}

// validateFlags checks the flags that need no store.
func (c *config) validateFlags() error {
	switch {
	case c.Target != "" && c.InProcess:
		return errors.New("--target and --inprocess exclude each other")
	case c.Target == "" && !c.InProcess:
		return errors.New("give --target HOST:PORT (a running rolloutd) or --inprocess")
	case c.Concurrency < 1, c.Shards < 1, c.Records < 1, c.RecordBytes < 0:
		return errors.New("--concurrency, --shards and --records must be at least 1, --record-bytes at least 0")
	case c.Count < 1 && c.Duration <= 0:
		return errors.New("--count must be at least 1 (or set --duration)")
	case c.ReadFraction < 0 || c.ReadFraction > 1:
		return fmt.Errorf("--read-fraction %v: want 0..1", c.ReadFraction)
	case c.MaxWriters < 1:
		return errors.New("--max-writers must be at least 1")
	case c.Azurite != "" && c.Azurite != "http" && c.Azurite != "https":
		return fmt.Errorf("--azurite %q: want http or https", c.Azurite)
	case c.Progress != "auto" && c.Progress != "plain" && c.Progress != "off":
		return fmt.Errorf("--progress %q: want auto, plain or off", c.Progress)
	}
	for _, m := range c.Modes {
		if !slices.Contains(allModes, m) {
			return fmt.Errorf("--mode %q: want one or more of %s", m, strings.Join(allModes, ", "))
		}
		if m == modeResidentShard && !c.InProcess {
			return fmt.Errorf("--mode %s calls the shard writer directly: it needs --inprocess", m)
		}
	}
	if len(c.Modes) == 0 && !c.Compare {
		return errors.New("--mode: give at least one mode")
	}
	for _, a := range []string{c.Target, c.GetTarget} {
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("target %q: want host:port: %w", a, err)
		}
	}
	if c.GetTarget != "" && c.Target == "" {
		return errors.New("--get-target needs --target")
	}
	return nil
}

// resolveStore parses --store, or picks the default one, and reads the
// Azure credentials it needs.
func (c *config) resolveStore(getenv func(string) string) error {
	raw := c.Store
	if raw == "" {
		switch {
		case c.Azurite != "":
			raw = "azblob://rolloutbench"
		case c.InProcess:
			raw = "file://"
		}
	}
	if raw != "" {
		s, err := parseStoreURL(raw)
		if err != nil {
			return fmt.Errorf("--store %q: %w", raw, err)
		}
		c.store = s
	}
	if c.Azurite != "" && c.store.Kind != "azblob" {
		return fmt.Errorf("--azurite serves Azure Blob: use --store azblob://CONTAINER (or leave --store empty)")
	}
	if c.store.Kind == "azblob" && c.Azurite == "" {
		c.azureConn = getenv(envConnectionString)
		if c.azureConn == "" {
			return fmt.Errorf("--store %s needs %s (or --azurite to start one)", c.store, envConnectionString)
		}
	}
	return nil
}

// validateStoreUse checks that the modes and the target can use the store,
// and derives the target's metrics URL.
func (c *config) validateStoreUse() error {
	if (slices.Contains(c.Modes, modeFloorFS) || slices.Contains(c.Modes, modeFloor1FS)) && (c.store.Kind != "local" || !c.InProcess) {
		return errors.New("--mode floor-fs and floor1-fs are the embedded local store's floors: they need --inprocess and a local --store")
	}
	if c.Target != "" && c.store.Kind == "local" {
		return errors.New("--store with a local directory is held by the rolloutd that serves it; a remote target's store must be azblob:// (or give none)")
	}
	needStore := c.Compare
	for _, m := range c.Modes {
		needStore = needStore || m == modeFloor || m == modeFloor1 || m == modePerAppend
	}
	if c.Target != "" && c.store.Kind == "" && needStore && !c.Compare {
		return errors.New("modes floor, floor1 and per-append talk to the blob store directly: give --store azblob://CONTAINER[/PREFIX] with " + envConnectionString)
	}
	if c.Target != "" && c.MetricsURL == "" {
		host, _, _ := net.SplitHostPort(c.Target)
		if host == "" {
			host = "localhost"
		}
		c.MetricsURL = "http://" + net.JoinHostPort(host, "9090") + "/metrics"
	}
	return nil
}

func parseStoreURL(raw string) (storeURL, error) {
	switch {
	case raw == "mem://":
		return storeURL{Kind: "mem"}, nil
	case raw == "file://":
		return storeURL{Kind: "local"}, nil
	case strings.HasPrefix(raw, "file://"):
		u, err := url.Parse(raw)
		if err != nil || u.Host != "" || !filepath.IsAbs(u.Path) {
			return storeURL{}, errors.New("want file:///absolute/path")
		}
		return storeURL{Kind: "local", Dir: u.Path}, nil
	case strings.HasPrefix(raw, "azblob://"):
		rest := strings.TrimPrefix(raw, "azblob://")
		container, prefix, _ := strings.Cut(rest, "/")
		if err := azure.ValidateContainerName(container); err != nil {
			return storeURL{}, err
		}
		return storeURL{Kind: "azblob", Container: container, Prefix: strings.TrimSuffix(prefix, "/")}, nil
	case strings.Contains(raw, "://"):
		return storeURL{}, errors.New("want mem://, file:///dir, azblob://CONTAINER[/PREFIX] or a directory")
	}
	dir, err := filepath.Abs(raw)
	if err != nil {
		return storeURL{}, err
	}
	return storeURL{Kind: "local", Dir: dir}, nil
}
