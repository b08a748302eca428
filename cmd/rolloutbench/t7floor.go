package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/azure"
)

// Target 7's floors run in a process of their own, so that the CPU they
// report is theirs alone: rolloutbench re-executes itself with
// envFloorChild set (main, and the tests' TestMain, check it first). The
// child reads a count per line on stdin, does that many floor operations
// one after another, and answers one JSON line: each operation's latency
// and the CPU (getrusage, user+sys) the block took. Its start-up is
// therefore never measured, and the parent can interleave its blocks with
// other phases'.
const (
	envFloorChild     = "ROLLOUTBENCH_FLOOR_CHILD"      // "fs" or "azure"
	envFloorDir       = "ROLLOUTBENCH_FLOOR_DIR"        // fs: the directory it writes in
	envFloorGen       = "ROLLOUTBENCH_FLOOR_GENERATION" // a file holding the generation blob to write
	envFloorContainer = "ROLLOUTBENCH_FLOOR_CONTAINER"  // azure: the container (its connection string in envConnectionString)
)

// floorBlock is the child's answer to one block.
type floorBlock struct {
	LatNs []int64 `json:"lat_ns"`
	CPUs  float64 `json:"cpu_s"`
	Err   string  `json:"err,omitempty"`
}

// floorChildMain is the child: it serves blocks until stdin ends.
func floorChildMain(ctx context.Context, getenv func(string) string, in io.Reader, out io.Writer) error {
	op, closeOp, err := floorChildOp(ctx, getenv)
	if err != nil {
		return err
	}
	defer closeOp()
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			return fmt.Errorf("floor child: block size %q: %w", sc.Text(), err)
		}
		blk := floorBlock{LatNs: make([]int64, 0, n)}
		cpu := processCPU()
		for range n {
			t0 := time.Now()
			if err := op(ctx); err != nil {
				blk.Err = err.Error()
				break
			}
			blk.LatNs = append(blk.LatNs, int64(time.Since(t0)))
		}
		blk.CPUs = processCPU() - cpu
		if err := enc.Encode(blk); err != nil {
			return err
		}
	}
	return sc.Err()
}

// floorChildOp builds the child's operation: the local store's one-write
// floor (floor1-fs) or Azure's (floor1: a create-only PUT through the
// same SDK and client rolloutd uses).
func floorChildOp(ctx context.Context, getenv func(string) string) (op func(context.Context) error, closeOp func(), err error) {
	gen, err := os.ReadFile(getenv(envFloorGen))
	if err != nil {
		return nil, nil, fmt.Errorf("floor child: %w", err)
	}
	switch kind := getenv(envFloorChild); kind {
	case "fs":
		c, err := fsFloor1Clients(getenv(envFloorDir), gen)(0)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context) error { return c.append(ctx, "", nil) }, func() {}, nil
	case "azure":
		s, err := azure.New(ctx, azure.Config{Container: getenv(envFloorContainer), ConnectionString: getenv(envConnectionString),
			MaxConns: azure.DefaultMaxConns, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, fmt.Errorf("floor child: %w", err)
		}
		c, err := floor1Clients(&floorSpec{prefix: "floor1", generation: gen, store: s})(0)
		if err != nil {
			_ = s.Close()
			return nil, nil, err
		}
		return func(ctx context.Context) error { return c.append(ctx, "", nil) }, func() { _ = s.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("floor child: %s=%q: want fs or azure", envFloorChild, kind)
	}
}

// floorChildExit runs the child in this process if the environment asks
// for one, and reports whether it did and its exit code.
func floorChildExit() (code int, isChild bool) {
	if os.Getenv(envFloorChild) == "" {
		return 0, false
	}
	if err := floorChildMain(context.Background(), os.Getenv, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rolloutbench floor child:", err)
		return 1, true
	}
	return 0, true
}

// floorProc is the parent's side of one floor child: what its blocks
// measured so far.
type floorProc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	lat  histogram
	ops  int64
	cpu  float64 // the child's CPU seconds over its blocks
	// elapsed is the blocks' wall time, as this process saw it.
	elapsed time.Duration
	errs    []string
}

// startFloor re-executes this binary as a floor child with env added.
func startFloor(name string, env ...string) (*floorProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f := &floorProc{name: name, cmd: exec.Command(self)}
	f.cmd.Env = append(os.Environ(), env...)
	f.cmd.Stderr = os.Stderr
	if f.in, err = f.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	f.out = bufio.NewScanner(stdout)
	f.out.Buffer(make([]byte, 1<<20), 64<<20)
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// block runs n operations in the child and adds their figures.
func (f *floorProc) block(n int) error {
	start := time.Now()
	defer func() { f.elapsed += time.Since(start) }()
	if _, err := fmt.Fprintln(f.in, n); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	if !f.out.Scan() {
		return fmt.Errorf("%s: no answer: %w", f.name, errors.Join(f.out.Err(), io.ErrUnexpectedEOF))
	}
	var blk floorBlock
	if err := json.Unmarshal(f.out.Bytes(), &blk); err != nil {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	for _, ns := range blk.LatNs {
		f.lat.record(time.Duration(ns))
	}
	f.ops += int64(len(blk.LatNs))
	f.cpu += blk.CPUs
	if blk.Err != "" && len(f.errs) < 3 {
		f.errs = append(f.errs, blk.Err)
	}
	return nil
}

// reset forgets the figures so far (after a warm-up).
func (f *floorProc) reset() {
	f.lat.reset()
	f.ops, f.cpu, f.errs, f.elapsed = 0, 0, nil, 0
}

// close ends the child: stdin's end is its signal to exit.
func (f *floorProc) close() error {
	_ = f.in.Close()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		return fmt.Errorf("%s did not exit: killed (%w)", f.name, <-done)
	}
}
