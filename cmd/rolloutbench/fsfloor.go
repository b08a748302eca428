package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// headerBytes stands for the header the local store writes before a blob's
// content (magic, lengths, ETag, PutID, name, checksum): about this long
// for rolloutd's blob names.
const headerBytes = 128

// fsFloorClients: the floor of an append on the embedded local store, as
// plain file operations in a loop, with no store, no shard writer and no
// gRPC: for the generation, write a new temporary file in one write, fsync
// it, rename it into the shard's generation directory and fsync that
// directory; then the same for the manifest, renamed over the shard's
// manifest, and the shard's directory fsynced. The same writes, fsyncs and
// renames the store makes for one lone append, on the same file system;
// each client has its own shard directory under dir.
func fsFloorClients(dir string, generation, manifest []byte) func(int) (clientOps, error) {
	gen := append(make([]byte, headerBytes), generation...)
	man := append(make([]byte, headerBytes), manifest...)
	return func(i int) (clientOps, error) {
		shardDir := filepath.Join(dir, "shards", fmt.Sprintf("c%d", i))
		genDir := filepath.Join(shardDir, "_g")
		tmpDir := filepath.Join(dir, "tmp")
		for _, d := range []string{genDir, tmpDir} {
			if err := os.MkdirAll(d, 0o750); err != nil {
				return clientOps{}, fmt.Errorf("floor-fs: %w", err)
			}
		}
		n := 0
		return clientOps{append: func(context.Context, string, []*rolloutv1.Record) error {
			n++
			tmp := filepath.Join(tmpDir, fmt.Sprintf("c%d-%d", i, n))
			if err := writeSyncRename(tmp, filepath.Join(genDir, fmt.Sprintf("%016x", n)), gen); err != nil {
				return err
			}
			if err := syncDir(genDir); err != nil {
				return err
			}
			if err := writeSyncRename(tmp+"m", filepath.Join(shardDir, "_manifest"), man); err != nil {
				return err
			}
			return syncDir(shardDir)
		}}, nil
	}
}

// fsFloor1Clients: the one-write floor of the embedded local store, for a
// commit by create: per append, the generation alone, written to a new
// temporary file in one write, fsynced, renamed into the client's log
// directory, and that directory fsynced. What the store does for one lone
// create-only put, with no manifest after it.
func fsFloor1Clients(dir string, generation []byte) func(int) (clientOps, error) {
	gen := append(make([]byte, headerBytes), generation...)
	return func(i int) (clientOps, error) {
		logDir := filepath.Join(dir, "shards", fmt.Sprintf("c%d", i), "_l")
		tmpDir := filepath.Join(dir, "tmp")
		for _, d := range []string{logDir, tmpDir} {
			if err := os.MkdirAll(d, 0o750); err != nil {
				return clientOps{}, fmt.Errorf("floor1-fs: %w", err)
			}
		}
		n := 0
		return clientOps{append: func(context.Context, string, []*rolloutv1.Record) error {
			n++
			tmp := filepath.Join(tmpDir, fmt.Sprintf("l%d-%d", i, n))
			if err := writeSyncRename(tmp, filepath.Join(logDir, fmt.Sprintf("%016x", n)), gen); err != nil {
				return err
			}
			return syncDir(logDir)
		}}, nil
	}
}

func writeSyncRename(tmp, path string, data []byte) error {
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// processCPU returns the CPU time this process has used, user and system,
// in seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
