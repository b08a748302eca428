package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// rolloutd admin: the shard lifecycle, over gRPC, against a running
// rolloutd, with the client's TLS and mTLS options. There is no sweeper in
// the server: expiry is this explicit, audited act (the server logs every
// delete with the caller's identity), run by hand or by deploy/k8s's
// optional purge CronJob.

func init() {
	register(&command{
		name:    "admin",
		summary: "list, describe, delete and purge shards, and manage consumers, of a running rolloutd (rolloutd admin --help)",
		run:     runAdmin,
	})
}

// adminCommands are admin's subcommands, in the order its usage lists
// them. admin's usage, the errors that name the commands, each command's
// --help and flags, and the dispatch all come from this table.
var adminCommands = []*adminCommand{
	{
		name: "list",
		synopsis: `[--prefix P] [--summary]            list the shards under a prefix
                                                (no --prefix: every shard)`,
		help: "Lists the shards under a prefix (whole '/'-separated segments), one per line;\nwith --summary, a table of their sizes, last seqs and last commits;\na shard whose summary cannot be read is named on stderr, and the exit status is 1.",
		flags: func(fs *flag.FlagSet, a *adminArgs) {
			fs.StringVar(&a.prefix, "prefix", "", "list the shards under this `prefix`, on whole '/'-separated segments; omitted or empty, every shard")
			fs.BoolVar(&a.summary, "summary", false, "show each shard's records, bytes, last seq and last commit (a manifest read each)")
		},
		selection: func(a *adminArgs) (string, error) {
			return parsePrefix("admin list", a.prefix, "omit --prefix to list every shard")
		},
		run: func(ctx context.Context, c *client.Client, a *adminArgs) error {
			return adminList(ctx, c, a.stdout, a.stderr, a.selected, a.summary)
		},
	},
	{
		name:       "describe",
		synopsis:   "SHARD                               describe one shard",
		help:       "Describes one shard: its records, bytes, generations, seq range, epoch,\nincarnation, and created and last-commit times. A deleted shard is NOT_FOUND\n(SHARD_DELETED).",
		takesShard: true,
		run:        adminDescribe,
	},
	{
		name:       "delete",
		synopsis:   "SHARD [--expected-last-seq N]       delete one shard",
		help:       "Deletes one shard's records at once; the server reclaims their storage in the\nbackground. An Append afterwards starts the shard again, with higher seqs.\nDeleting a deleted shard resumes reclaiming its storage. Pass\n--expected-last-seq (the last seq of describe) to delete only if nothing was\nappended since.",
		takesShard: true,
		flags: func(fs *flag.FlagSet, a *adminArgs) {
			fs.StringVar(&a.expected, "expected-last-seq", "", "delete only if the shard's last seq is still `N` (see describe)")
		},
		run: adminDelete,
	},
	{
		name: "purge",
		synopsis: `(--prefix P | --all) --older-than D [--dry-run]
            delete every shard under P (with --all, every shard) whose last
            commit is older than D (a duration such as 36h, or days: 30d).
            Each delete passes the last seq purge saw, so a shard written
            since survives. Deleted shards whose storage was not yet
            reclaimed are finished.`,
		help: "Deletes every shard under --prefix (or, with --all, every shard) whose last\ncommit is older than --older-than. Each delete passes the last seq purge\nlisted, so a shard written since survives. The deletion of shards deleted\nbefore is resumed. Prints each shard it deletes, then a summary; exits 1 if\nany shard failed.",
		flags: func(fs *flag.FlagSet, a *adminArgs) {
			fs.StringVar(&a.prefix, "prefix", "", "purge the shards under this `prefix`, on whole '/'-separated segments (this or --all is required)")
			fs.BoolVar(&a.all, "all", false, "purge every shard (this or --prefix is required)")
			fs.StringVar(&a.olderThan, "older-than", "", "delete shards whose last commit is older than this `duration` (36h, 30d; required)")
			fs.BoolVar(&a.dryRun, "dry-run", false, "list what would be deleted, delete nothing")
		},
		selection: purgeSelection,
		run: func(ctx context.Context, c *client.Client, a *adminArgs) error {
			age, err := parseAge(a.olderThan)
			if err != nil {
				return fmt.Errorf("admin purge: --older-than: %w", err)
			}
			return adminPurge(ctx, c, a.stdout, a.stderr, a.selected, age, a.dryRun, time.Now())
		},
	},
	{
		name: "consumers",
		synopsis: `list|describe|reset|delete ...    consumers' stored positions
                                                (rolloutd admin consumers --help)`,
		dispatch: runAdminConsumers,
	},
}

// adminCommand is one admin subcommand.
type adminCommand struct {
	name string
	// synopsis follows the name in admin's list of commands: the
	// command's arguments and what it does, continuation lines indented
	// as printed.
	synopsis   string
	help       string // what the command does, for its --help
	takesShard bool   // it takes one SHARD argument
	// flags registers the command's own flags, beside the connection
	// flags every command takes.
	flags func(fs *flag.FlagSet, a *adminArgs)
	// selection checks what the command selects, before any connection,
	// and returns the prefix it acts on.
	selection func(a *adminArgs) (string, error)
	run       func(ctx context.Context, c *client.Client, a *adminArgs) error
	// dispatch, when set, runs a command that has commands of its own
	// (consumers) with the arguments after its name.
	dispatch func(args []string, stdout, stderr io.Writer) error
}

// adminArgs is an admin command's parsed command line and its output.
type adminArgs struct {
	conn      adminFlags
	prefix    string
	summary   bool
	expected  string
	olderThan string
	dryRun    bool
	all       bool

	shard    string // the SHARD argument, for a command that takes one
	selected string // the prefix that selection returned

	stdout, stderr io.Writer
}

// adminUsage is admin's usage, with the commands of adminCommands.
func adminUsage() string {
	var b strings.Builder
	b.WriteString("Usage: rolloutd admin <command> [flags]\n\nCommands:\n")
	for _, cmd := range adminCommands {
		fmt.Fprintf(&b, "  %-9s %s\n", cmd.name, cmd.synopsis)
	}
	b.WriteString(`
A prefix is whole '/'-separated segments: "exp" covers exp and exp/run1,
not exp2. '*' is not a prefix.

Every command takes the connection flags (see rolloutd admin list --help).
`)
	return b.String()
}

// adminNames is "list, describe, delete and purge" with conj as the last
// joint.
func adminNames(conj string) string {
	names := make([]string, len(adminCommands))
	for i, cmd := range adminCommands {
		names[i] = cmd.name
	}
	last := len(names) - 1
	return strings.Join(names[:last], ", ") + " " + conj + " " + names[last]
}

// adminFlags are the connection flags every admin command takes: the Go
// client's options.
type adminFlags struct {
	addr                          string
	tlsCA, tlsCert, tlsKey, tlsSN string
	tls                           bool
	timeout                       time.Duration
}

func (a *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.addr, "addr", "", "rolloutd's gRPC `address` (a gRPC target); default $"+envAddr+", else "+defaultAdminAddr)
	fs.BoolVar(&a.tls, "tls", false, "use TLS with the system's roots (implied by --tls-ca and --tls-cert)")
	fs.StringVar(&a.tlsCA, "tls-ca", "", "PEM `file` of the CAs that verify the server (TLS)")
	fs.StringVar(&a.tlsCert, "tls-cert", "", "PEM `file` of the client certificate chain (mTLS), with --tls-key")
	fs.StringVar(&a.tlsKey, "tls-key", "", "PEM `file` of the client key (mTLS)")
	fs.StringVar(&a.tlsSN, "tls-server-name", "", "`name` to verify the server's certificate against, when not the address's host")
	fs.DurationVar(&a.timeout, "timeout", 10*time.Minute, "bound on the whole command")
}

func (a *adminFlags) client() (*client.Client, error) {
	var opts []client.Option
	if a.tls || a.tlsCA != "" || a.tlsCert != "" || a.tlsKey != "" || a.tlsSN != "" {
		opts = append(opts, client.WithTLS(client.TLSConfig{CAFile: a.tlsCA, CertFile: a.tlsCert, KeyFile: a.tlsKey, ServerName: a.tlsSN}))
	}
	return client.New(a.target(os.Getenv), opts...)
}

// defaultAdminAddr is admin's address without --addr or ROLLOUTD_ADDR.
const defaultAdminAddr = "localhost:50051"

// target is the address to dial: --addr, else ROLLOUTD_ADDR, else the
// default.
func (a *adminFlags) target(getenv func(string) string) string {
	switch {
	case a.addr != "":
		return a.addr
	case getenv(envAddr) != "":
		return getenv(envAddr)
	}
	return defaultAdminAddr
}

func runAdmin(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, adminUsage())
		return fmt.Errorf("admin: name a command: %s", adminNames("or"))
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, adminUsage())
		return nil
	}
	i := slices.IndexFunc(adminCommands, func(cmd *adminCommand) bool { return cmd.name == args[0] })
	if i < 0 {
		return fmt.Errorf("admin: unknown command %q: the commands are %s", args[0], adminNames("and"))
	}
	cmd := adminCommands[i]
	if cmd.dispatch != nil {
		return cmd.dispatch(args[1:], stdout, stderr)
	}
	a := &adminArgs{stdout: stdout, stderr: stderr}
	if help, err := cmd.parse(args[1:], a); help || err != nil {
		return err
	}
	if cmd.selection != nil {
		p, err := cmd.selection(a)
		if err != nil {
			return err
		}
		a.selected = p
	}
	c, err := a.conn.client()
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.timeout)
	defer cancel()
	return cmd.run(ctx, c, a)
}

// parse parses args, the command line after the command's name, into a.
// On --help it prints the command's usage to a.stdout and returns help.
func (cmd *adminCommand) parse(args []string, a *adminArgs) (help bool, err error) {
	fs := flag.NewFlagSet("rolloutd admin "+cmd.name, flag.ContinueOnError)
	// The flag package would print the whole usage after a bad flag; the
	// error names the flag, and --help shows the usage.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	a.conn.register(fs)
	if cmd.flags != nil {
		cmd.flags(fs, a)
	}
	// Flags may come before or after the shard.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				cmd.printHelp(a.stdout, fs)
				return true, nil
			}
			return false, fmt.Errorf("admin %s: %w (see rolloutd admin %s --help)", cmd.name, err, cmd.name)
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return false, cmd.takeArgs(rest, a)
}

func (cmd *adminCommand) printHelp(w io.Writer, fs *flag.FlagSet) {
	shard := ""
	if cmd.takesShard {
		shard = " SHARD"
	}
	fmt.Fprintf(w, "Usage: rolloutd admin %s%s [flags]\n\n%s\n\nFlags:\n", cmd.name, shard, cmd.help)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// takeArgs checks the arguments that are not flags, rest: one shard for a
// command that takes it, none for the others.
func (cmd *adminCommand) takeArgs(rest []string, a *adminArgs) error {
	sub := cmd.name
	switch {
	case !cmd.takesShard && len(rest) > 0:
		return fmt.Errorf("admin %s: takes no arguments, got %q (see rolloutd admin %s --help)", sub, rest, sub)
	case !cmd.takesShard:
		return nil
	case len(rest) == 0:
		return fmt.Errorf("admin %s: name the shard, as in: rolloutd admin %s exp-42/actor-7", sub, sub)
	case len(rest) > 1:
		return fmt.Errorf("admin %s: takes one shard, got %d: %q", sub, len(rest), rest)
	case rest[0] == "":
		return fmt.Errorf("admin %s: the shard is empty: name one, as in: rolloutd admin %s exp-42/actor-7 (%s acts on one shard only)", sub, sub, sub)
	}
	a.shard = rest[0]
	return nil
}

func adminDescribe(ctx context.Context, c *client.Client, a *adminArgs) error {
	info, err := c.DescribeShard(ctx, a.shard)
	if err != nil {
		return callError("admin describe "+a.shard, err)
	}
	printInfo(a.stdout, info)
	return nil
}

func adminDelete(ctx context.Context, c *client.Client, a *adminArgs) error {
	var exp *uint64
	if a.expected != "" {
		n, err := strconv.ParseUint(a.expected, 10, 64)
		if err != nil {
			return fmt.Errorf("admin delete: --expected-last-seq %q: want a whole number, the shard's last seq (rolloutd admin describe %s)", a.expected, a.shard)
		}
		exp = &n
	}
	resp, err := c.DeleteShard(ctx, a.shard, exp)
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		return fmt.Errorf("%w; if it reached the server, the delete may have taken effect: see rolloutd admin describe %s, and delete again with --expected-last-seq", callError("admin delete "+a.shard, err), a.shard)
	case err != nil:
		return callError("admin delete "+a.shard, err)
	}
	if resp.GetAlreadyDeleted() {
		fmt.Fprintf(a.stdout, "%s: already deleted (last seq %d); reclaiming its storage resumed\n", a.shard, resp.GetLastSeq())
	} else {
		fmt.Fprintf(a.stdout, "%s: deleted %d records through seq %d\n", a.shard, resp.GetRecords(), resp.GetLastSeq())
	}
	return nil
}

// purgeSelection checks what purge selects, before any connection: the
// prefix, on whole segments, and, since purge deletes, an explicit --all
// for every shard, never an empty prefix.
func purgeSelection(a *adminArgs) (string, error) {
	switch {
	case a.all && a.prefix != "":
		return "", errors.New("admin purge: --all and --prefix both given: give --prefix P for the shards under P, or --all for every shard")
	case a.prefix == "*":
		return "", errors.New("admin purge: --prefix '*': '*' is not a prefix; give --all to purge every shard")
	case !a.all && a.prefix == "":
		return "", errors.New("admin purge: say what to purge: --prefix P for the shards under P, or --all for every shard (an empty --prefix is not every shard)")
	case a.olderThan == "":
		return "", errors.New("admin purge: --older-than is required")
	}
	return parsePrefix("admin purge", a.prefix, "give --all to purge every shard")
}

// callError is err, the error of a call by an admin command, prefixed
// with what (the command and its shard). A *client.Error loses its own
// "rolloutd: " prefix: main prints one already.
func callError(what string, err error) error {
	return &adminCallError{what: what, err: err}
}

type adminCallError struct {
	what string
	err  error
}

func (e *adminCallError) Error() string {
	msg := e.err.Error()
	var ce *client.Error
	if errors.As(e.err, &ce) {
		msg = strings.TrimPrefix(msg, "rolloutd: ")
	}
	if e.what == "" {
		return msg
	}
	return e.what + ": " + msg
}

func (e *adminCallError) Unwrap() error { return e.err }

func adminList(ctx context.Context, c *client.Client, stdout, stderr io.Writer, prefix string, summary bool) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	// The header waits for the listing's first page: a call that fails
	// before it prints only the error.
	headed := !summary
	head := func() {
		if !headed {
			fmt.Fprintln(tw, "SHARD\tRECORDS\tBYTES\tLAST SEQ\tLAST COMMIT\tSTATE")
			headed = true
		}
	}
	n, failed := 0, 0
	for s, err := range c.AllShards(ctx, prefix, 1000, summary) {
		if err != nil {
			tw.Flush()
			return callError("admin list", err)
		}
		head()
		n++
		if !summary {
			fmt.Fprintln(tw, s.GetShard())
			continue
		}
		if e := s.GetSummaryError(); e != "" {
			// One bad shard fails only itself: say which, and go on.
			failed++
			fmt.Fprintf(tw, "%s	-	-	-	-	unreadable\n", s.GetShard())
			fmt.Fprintf(stderr, "list: %s: %s\n", s.GetShard(), e)
			continue
		}
		sum := s.GetSummary()
		state := "live"
		if sum.GetDeleted() {
			state = "deleted " + sum.GetDeletedAt().AsTime().UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", s.GetShard(), sum.GetRecords(), sum.GetBytes(), sum.GetLastSeq(), when(sum.GetLastCommitAt().AsTime(), sum.GetLastCommitAt() != nil), state)
	}
	if n == 0 {
		if err := wrongPrefix(ctx, "admin list", clientLister(c), prefix); err != nil {
			return err
		}
	}
	head() // an empty listing still arrived
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("admin list: %d of %d shards could not be summarised (see above)", failed, n)
	}
	return nil
}

func when(t time.Time, set bool) string {
	if !set {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func printInfo(w io.Writer, info *rolloutv1.ShardInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"shard", info.GetShard()},
		{"records", fmt.Sprint(info.GetRecords())},
		{"bytes", fmt.Sprint(info.GetBytes())},
		{"generations", fmt.Sprint(info.GetGenerations())},
		{"first seq", fmt.Sprint(info.GetFirstSeq())},
		{"last seq", fmt.Sprint(info.GetLastSeq())},
		{"epoch", fmt.Sprint(info.GetEpoch())},
		{"incarnation", fmt.Sprint(info.GetIncarnation())},
		{"format version", fmt.Sprint(info.GetFormatVersion())},
		{"writer here", fmt.Sprint(info.GetWriterHere())},
		{"created", when(info.GetCreatedAt().AsTime(), info.GetCreatedAt() != nil)},
		{"last commit", when(info.GetLastCommitAt().AsTime(), info.GetLastCommitAt() != nil)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	tw.Flush()
}
