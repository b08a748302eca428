// Command rolloutd serves rollout.v1.RolloutService: durable, epoch-fenced,
// group-committed storage of RL rollout records in blob storage.
//
//	make run                              # build, then serve on ./rolloutd-data
//	rolloutd --store azblob://rollouts    # Azure Blob Storage (same as rolloutd serve ...)
//	rolloutd --help                       # every flag, and the subcommands
//	rolloutd version                      # version, commit and Go version
//
// main only dispatches: rolloutd with no subcommand, or with flags only,
// runs serve. Each subcommand lives in its own file and registers itself
// (see command); serve wires things together: flags and environment into
// one config, the one blob store (the only place that knows the backend),
// the gRPC server and the metrics listener, and the shutdown on
// SIGTERM/SIGINT.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rolloutd:", err)
		os.Exit(1)
	}
}

// command is one subcommand of rolloutd. A subcommand is a file that
// registers its command in an init function; nothing else changes.
type command struct {
	name    string
	summary string // one line for the list of commands in --help
	// run runs the command with the arguments after its name. It writes
	// its --help to stdout and returns nil then.
	run func(args []string, stdout, stderr io.Writer) error
}

// defaultCommand runs when rolloutd gets no subcommand, or flags only.
const defaultCommand = "serve"

var commands = map[string]*command{}

func register(c *command) {
	if commands[c.name] != nil {
		panic("rolloutd: command " + c.name + " registered twice")
	}
	commands[c.name] = c
}

// run dispatches to the subcommand named by args[0], or to serve when
// args is empty or starts with a flag: `rolloutd --listen :50051` is
// `rolloutd serve --listen :50051`, as it was before subcommands existed.
func run(args []string, stdout, stderr io.Writer) error {
	name := defaultCommand
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	c := commands[name]
	if c == nil {
		return fmt.Errorf("unknown command %q: the commands are %s (see rolloutd --help)", name, strings.Join(commandNames(), ", "))
	}
	return c.run(args, stdout, stderr)
}

func commandNames() []string {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// commandList is the list of commands that --help shows.
func commandList() string {
	var b strings.Builder
	for _, n := range commandNames() {
		fmt.Fprintf(&b, "  %-9s %s\n", n, commands[n].summary)
	}
	return b.String()
}
