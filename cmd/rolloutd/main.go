// Command rolloutd serves rollout.v1.RolloutService: durable, epoch-fenced,
// group-committed storage of RL rollout records in blob storage.
//
//	go run ./cmd/rolloutd                 # local directory ./rolloutd-data
//	rolloutd --store azblob://rollouts    # Azure Blob Storage
//	rolloutd --help                       # every flag
//
// main only wires things together: flags and environment into one config,
// the one blob store (the only place that knows the backend), the gRPC
// server and the metrics listener, and the shutdown on SIGTERM/SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rolloutd:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return serve(ctx, stop, cfg)
}
