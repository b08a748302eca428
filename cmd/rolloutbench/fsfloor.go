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
		write, err := generationWriter("floor-fs", dir, filepath.Join(shardDir, "_g"), fmt.Sprintf("c%d", i), gen)
		if err != nil {
			return clientOps{}, err
		}
		return clientOps{append: func(context.Context, string, []*rolloutv1.Record) error {
			tmp, err := write()
			if err != nil {
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
		write, err := generationWriter("floor1-fs", dir, filepath.Join(dir, "shards", fmt.Sprintf("c%d", i), "_l"), fmt.Sprintf("l%d", i), gen)
		if err != nil {
			return clientOps{}, err
		}
		return clientOps{append: func(context.Context, string, []*rolloutv1.Record) error {
			_, err := write()
			return err
		}}, nil
	}
}

// generationWriter makes genDir and dir's tmp, and returns write, which
// writes a client's next generation, the nth: to a new temporary file
// tag-n in one write, fsynced, renamed into genDir, and genDir fsynced.
// write returns the temporary file's name. what names the floor in errors.
func generationWriter(what, dir, genDir, tag string, gen []byte) (write func() (tmp string, err error), err error) {
	tmpDir := filepath.Join(dir, "tmp")
	for _, d := range []string{genDir, tmpDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	n := 0
	return func() (string, error) {
		n++
		tmp := filepath.Join(tmpDir, fmt.Sprintf("%s-%d", tag, n))
		if err := writeSyncRename(tmp, filepath.Join(genDir, fmt.Sprintf("%016x", n)), gen); err != nil {
			return "", err
		}
		return tmp, syncDir(genDir)
	}, nil
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
