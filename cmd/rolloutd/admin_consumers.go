package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/consumer"
)

// rolloutd admin consumers: the stored positions of named consumers
// (README.md, "Consumers: stored positions"), listed, described, reset and deleted.

// consumerCommands are admin consumers' commands, in usage order.
var consumerCommands = []*consumerCommand{
	{
		name:     "list",
		synopsis: "[--prefix P]                     the consumers under a prefix",
		help:     "Lists the consumers whose prefix lies under --prefix (every consumer without it)\nthat the caller may scan: prefix, name, generation, shards with a position, last\nchange.",
		run:      consumersList,
	},
	{
		name:      "describe",
		synopsis:  "NAME [--prefix P] [--positions]  a consumer's generation and lag",
		help:      "Describes the consumer NAME of --prefix: its generation, the shards it has a\nposition for, and its lag (records committed to the shards under the prefix and\nnot yet past its positions, over at most 1000 of them); with --positions, each\nshard's stored cursor.",
		takesName: true,
		flags: func(fs *flag.FlagSet, a *consumerArgs) {
			fs.BoolVar(&a.positions, "positions", false, "show each shard's stored cursor")
		},
		run: consumersDescribe,
	},
	{
		name:      "reset",
		synopsis:  "NAME [--prefix P] (--to earliest|latest | --position SHARD=SEQ ...)",
		help:      "Moves the consumer NAME of --prefix, backwards included, and starts its next\ngeneration: members still committing for the old one are refused\n(CONSUMER_RESET) and must start again from the consumer. --to earliest drops\nevery position (each shard is read from its first record); --to latest sets\neach shard under the prefix to its last seq now; --position (repeatable) sets\nexactly the positions given, and no others. Creates the consumer if it does\nnot exist.",
		takesName: true,
		flags: func(fs *flag.FlagSet, a *consumerArgs) {
			fs.StringVar(&a.to, "to", "", "`earliest` or latest")
			fs.Func("position", "set `SHARD=SEQ` (repeatable): the shard is read after SEQ", func(v string) error {
				sh, seq, ok := strings.Cut(v, "=")
				n, err := strconv.ParseUint(seq, 10, 64)
				if !ok || sh == "" || err != nil {
					return fmt.Errorf("want SHARD=SEQ with SEQ a whole number, got %q", v)
				}
				if _, dup := a.set[sh]; dup {
					return fmt.Errorf("shard %q given twice", sh)
				}
				a.set[sh] = n
				return nil
			})
		},
		run: consumersReset,
	},
	{
		name:      "delete",
		synopsis:  "NAME [--prefix P]                delete a consumer and its positions",
		help:      "Deletes the consumer NAME of --prefix and its positions. Members still\ncommitting to it for a generation above 1 are refused (CONSUMER_RESET); a\ncommit without a generation, or for generation 1, creates it again.",
		takesName: true,
		run:       consumersDelete,
	},
}

// consumerCommand is one admin consumers command.
type consumerCommand struct {
	name, synopsis, help string
	takesName            bool // it takes the consumer's NAME
	flags                func(fs *flag.FlagSet, a *consumerArgs)
	run                  func(ctx context.Context, c *client.Client, a *consumerArgs) error
}

// consumerArgs is an admin consumers command's parsed command line.
type consumerArgs struct {
	conn      adminFlags
	prefix    string
	name      string
	json      bool
	positions bool
	to        string
	set       map[string]uint64

	stdout io.Writer
}

func consumersUsage() string {
	var b strings.Builder
	b.WriteString("Usage: rolloutd admin consumers <command> [flags]\n\nA consumer is a prefix and a name; it stores, per shard, the cursor up to which\nits members processed the shard (CommitConsumer). Commands:\n")
	for _, cmd := range consumerCommands {
		fmt.Fprintf(&b, "  %-9s %s\n", cmd.name, cmd.synopsis)
	}
	b.WriteString("\n--prefix is the consumer's prefix (whole '/'-separated segments; omitted: the\nconsumer of every shard). Every command takes --json and the connection flags\n(see rolloutd admin list --help).\n")
	return b.String()
}

func runAdminConsumers(args []string, stdout, stderr io.Writer) error {
	names := make([]string, len(consumerCommands))
	for i, cmd := range consumerCommands {
		names[i] = cmd.name
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, consumersUsage())
		return fmt.Errorf("admin consumers: name a command: %s", strings.Join(names, ", "))
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, consumersUsage())
		return nil
	}
	i := slices.IndexFunc(consumerCommands, func(cmd *consumerCommand) bool { return cmd.name == args[0] })
	if i < 0 {
		return fmt.Errorf("admin consumers: unknown command %q: the commands are %s", args[0], strings.Join(names, ", "))
	}
	cmd := consumerCommands[i]
	a := &consumerArgs{stdout: stdout, set: map[string]uint64{}}
	if help, err := cmd.parse(args[1:], a); help || err != nil {
		return err
	}
	c, err := a.conn.client()
	if err != nil {
		return fmt.Errorf("admin consumers: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), a.conn.timeout)
	defer cancel()
	return cmd.run(ctx, c, a)
}

// parse parses args, the command line after the command's name, into a,
// and checks the prefix and the name before any connection.
func (cmd *consumerCommand) parse(args []string, a *consumerArgs) (help bool, err error) {
	sub := "admin consumers " + cmd.name
	fs := flag.NewFlagSet("rolloutd "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	a.conn.register(fs)
	fs.StringVar(&a.prefix, "prefix", "", "the consumer's `prefix`, whole '/'-separated segments; omitted, every shard")
	fs.BoolVar(&a.json, "json", false, "print the answer as JSON (protojson)")
	if cmd.flags != nil {
		cmd.flags(fs, a)
	}
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				name := ""
				if cmd.takesName {
					name = " NAME"
				}
				fmt.Fprintf(a.stdout, "Usage: rolloutd %s%s [flags]\n\n%s\n\nFlags:\n", sub, name, cmd.help)
				fs.SetOutput(a.stdout)
				fs.PrintDefaults()
				return true, nil
			}
			return false, fmt.Errorf("%s: %w (see rolloutd %s --help)", sub, err, sub)
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	p, err := parsePrefix(sub, a.prefix, "omit --prefix for the consumer of every shard")
	if err != nil {
		return false, err
	}
	a.prefix = p
	switch {
	case !cmd.takesName && len(rest) > 0:
		return false, fmt.Errorf("%s: takes no arguments, got %q", sub, rest)
	case !cmd.takesName:
		return false, nil
	case len(rest) != 1:
		return false, fmt.Errorf("%s: name one consumer, as in: rolloutd %s trainer --prefix exp-42", sub, sub)
	}
	if err := consumer.ValidateName("NAME", rest[0]); err != nil {
		return false, fmt.Errorf("%s: %w", sub, err)
	}
	a.name = rest[0]
	return false, nil
}

// label names a consumer in output: "<prefix>:<name>".
func label(prefix, name string) string { return prefix + ":" + name }

func consumersList(ctx context.Context, c *client.Client, a *consumerArgs) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if !a.json {
		fmt.Fprintln(tw, "PREFIX\tCONSUMER\tGENERATION\tSHARDS\tUPDATED")
	}
	for ci, err := range c.AllConsumers(ctx, a.prefix) {
		if err != nil {
			tw.Flush()
			return callError("admin consumers list", err)
		}
		if a.json {
			b, err := protojson.Marshal(ci)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s\n", b)
			continue
		}
		prefix := ci.GetPrefix()
		if prefix == "" {
			prefix = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", prefix, ci.GetConsumer(), ci.GetGeneration(), ci.GetShards(), when(ci.GetUpdatedAt().AsTime(), ci.GetUpdatedAt() != nil))
	}
	return tw.Flush()
}

func consumersDescribe(ctx context.Context, c *client.Client, a *consumerArgs) error {
	what := "admin consumers describe " + label(a.prefix, a.name)
	info, err := c.DescribeConsumer(ctx, a.prefix, a.name, a.positions)
	if err != nil {
		return callError(what, err)
	}
	return printConsumer(a, info, true)
}

func consumersReset(ctx context.Context, c *client.Client, a *consumerArgs) error {
	what := "admin consumers reset " + label(a.prefix, a.name)
	to := client.StartDefault // with positions: exactly those
	switch {
	case a.to != "" && len(a.set) > 0:
		return fmt.Errorf("%s: give --to or --position, not both", what)
	case a.to == "earliest":
		to = client.StartEarliest
	case a.to == "latest":
		to = client.StartLatest
	case a.to != "":
		return fmt.Errorf("%s: --to %q: want earliest or latest", what, a.to)
	case len(a.set) == 0:
		return fmt.Errorf("%s: say where to: --to earliest, --to latest, or --position SHARD=SEQ (repeatable)", what)
	}
	info, err := c.ResetConsumer(ctx, a.prefix, a.name, to, a.set)
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		return fmt.Errorf("%w; the reset may have taken effect: see rolloutd admin consumers describe %s --prefix %q", callError(what, err), a.name, a.prefix)
	case err != nil:
		return callError(what, err)
	}
	return printConsumer(a, info, false)
}

func consumersDelete(ctx context.Context, c *client.Client, a *consumerArgs) error {
	what := "admin consumers delete " + label(a.prefix, a.name)
	if err := c.DeleteConsumer(ctx, a.prefix, a.name); err != nil {
		return callError(what, err)
	}
	if a.json {
		fmt.Fprintln(a.stdout, "{}")
		return nil
	}
	fmt.Fprintf(a.stdout, "%s: deleted\n", label(a.prefix, a.name))
	return nil
}

// printConsumer prints info as "key: value" lines, with lag when it was
// computed, then its positions in shard order, if any.
func printConsumer(a *consumerArgs, info *rolloutv1.ConsumerInfo, lag bool) error {
	if a.json {
		b, err := protojson.Marshal(info)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	rows := [][2]string{
		{"prefix", info.GetPrefix()},
		{"consumer", info.GetConsumer()},
		{"generation", fmt.Sprint(info.GetGeneration())},
		{"shards", fmt.Sprint(info.GetShards())},
	}
	if lag {
		rows = append(rows, [2]string{"lag records", fmt.Sprint(info.GetLagRecords())}, [2]string{"lagging shards", fmt.Sprint(info.GetLaggingShards())})
	}
	rows = append(rows,
		[2]string{"created", when(info.GetCreatedAt().AsTime(), info.GetCreatedAt() != nil)},
		[2]string{"updated", when(info.GetUpdatedAt().AsTime(), info.GetUpdatedAt() != nil)})
	for _, kv := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	if len(info.GetPositions()) > 0 {
		fmt.Fprintln(tw, "\nSHARD\tPOSITION")
		for _, sh := range slices.Sorted(maps.Keys(info.GetPositions())) {
			fmt.Fprintf(tw, "%s\t%d\n", sh, info.GetPositions()[sh])
		}
	}
	return tw.Flush()
}
