// Command exportbench measures rolloutd export against its targets
// (docs/export.md): the wall time of exporting one shard beside a full
// in-process Scan of it that only decodes records, the Parquet output's
// size against the shard's stored generation bytes, and peak RSS at two
// shard sizes. Each measured phase runs in its own process, so that its
// peak RSS is its own; each runs three times and the medians are
// reported.
//
//	go run ./internal/export/exportbench                     # 10k and 100k records
//	go run ./internal/export/exportbench -records 10000,100000 -compression zstd
//
// Records come from package synth (seed 1, about 1 KiB of English-like
// content, tokens and bfloat16-rounded logprobs filled), appended through
// a real shard writer to the embedded local store, merged as the server
// would, then closed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
	"github.com/rolloutd/rolloutd/internal/export"
	"github.com/rolloutd/rolloutd/internal/export/synth"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

const shardName = "bench/actor-0"

// result is what one phase process prints.
type result struct {
	Seconds  float64 `json:"seconds"`
	MaxRSSKB int64   `json:"max_rss_kb"`
	Records  int64   `json:"records"`
	Bytes    int64   `json:"bytes"`
}

func main() {
	phase := flag.String("phase", "", "internal: run one phase in this process (gen, scan, export)")
	dir := flag.String("dir", "", "internal: the data directory")
	out := flag.String("out", "", "internal: the export directory")
	n := flag.Int("n", 0, "internal: records to generate")
	records := flag.String("records", "10000,100000", "shard sizes to measure, comma-separated")
	compression := flag.String("compression", "zstd", "export compression")
	runs := flag.Int("runs", 3, "runs of each phase (the median is reported)")
	cpuprofile := flag.String("cpuprofile", "", "internal: write a CPU profile of the phase to this file")
	heapAfter := flag.Duration("heapprofile-after", 0, "internal: write a heap profile of the phase to heap.prof after this long")
	flag.Parse()
	if *heapAfter > 0 {
		time.AfterFunc(*heapAfter, func() {
			if f, err := os.Create("heap.prof"); err == nil {
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
		})
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if *phase != "" {
		r, err := runPhase(*phase, *dir, *out, *n, *compression)
		if err != nil {
			fmt.Fprintln(os.Stderr, "exportbench:", err)
			os.Exit(1) //nolint:gocritic // the profile is lost with the failure
		}
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		r.MaxRSSKB = ru.Maxrss
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	if err := drive(*records, *compression, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "exportbench:", err)
		os.Exit(1)
	}
}

func self(args ...string) (result, error) {
	exe, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("%v: %w", args, err)
	}
	var r result
	return r, json.Unmarshal(b, &r)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func drive(records, compression string, runs int) error {
	tmp, err := os.MkdirTemp("", "exportbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rss := map[int]float64{}
	var sizes []int
	for _, f := range strings.Split(records, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-records: %w", err)
		}
		sizes = append(sizes, n)
	}
	for _, n := range sizes {
		dir := filepath.Join(tmp, fmt.Sprintf("data-%d", n))
		g, err := self("-phase", "gen", "-dir", dir, "-n", strconv.Itoa(n))
		if err != nil {
			return err
		}
		fmt.Printf("%d records: generated in %.1fs; stored generation bytes %d (%.0f B/record)\n", n, g.Seconds, g.Bytes, float64(g.Bytes)/float64(n))
		var scan, exp, scanRSS, expRSS []float64
		var outBytes int64
		for i := range runs {
			s, err := self("-phase", "scan", "-dir", dir)
			if err != nil {
				return err
			}
			if s.Records != int64(n) {
				return fmt.Errorf("scan read %d records, want %d", s.Records, n)
			}
			out := filepath.Join(tmp, fmt.Sprintf("out-%d-%d", n, i))
			e, err := self("-phase", "export", "-dir", dir, "-out", out, "-compression", compression)
			if err != nil {
				return err
			}
			if e.Records != int64(n) {
				return fmt.Errorf("export wrote %d records, want %d", e.Records, n)
			}
			os.RemoveAll(out)
			scan, exp = append(scan, s.Seconds), append(exp, e.Seconds)
			scanRSS, expRSS = append(scanRSS, float64(s.MaxRSSKB)), append(expRSS, float64(e.MaxRSSKB))
			outBytes = e.Bytes
			fmt.Printf("  run %d: scan %.2fs (%d MiB RSS), export %.2fs (%d MiB RSS), ratio %.2f\n", i+1, s.Seconds, s.MaxRSSKB>>10, e.Seconds, e.MaxRSSKB>>10, e.Seconds/s.Seconds)
		}
		ratios := make([]float64, len(scan))
		for i := range scan {
			ratios[i] = exp[i] / scan[i]
		}
		fmt.Printf("  median: scan %.2fs, export %.2fs, export/scan %.2f (median of per-run ratios); output %d bytes, output/stored generations %.3f (%s); peak RSS export %.0f MiB, scan %.0f MiB\n",
			median(scan), median(exp), median(ratios), outBytes, float64(outBytes)/float64(g.Bytes), compression, median(expRSS)/1024, median(scanRSS)/1024)
		rss[n] = median(expRSS)
	}
	if len(sizes) >= 2 {
		a, b := sizes[0], sizes[len(sizes)-1]
		fmt.Printf("peak RSS of export, %d vs %d records: %.2fx\n", b, a, rss[b]/rss[a])
	}
	return nil
}

func runPhase(phase, dir, out string, n int, compression string) (result, error) {
	ctx := context.Background()
	switch phase {
	case "gen":
		return gen(ctx, dir, n)
	case "scan":
		s, err := localstore.Open(dir)
		if err != nil {
			return result{}, err
		}
		defer s.Close()
		start := time.Now()
		var count int64
		err = shard.NewReader(s, shard.ReaderOptions{}).Scan(ctx, shardName, shard.ScanOptions{}, func(b shard.Batch) error {
			count += int64(len(b.Records))
			return nil
		})
		return result{Seconds: time.Since(start).Seconds(), Records: count}, err
	case "export":
		if os.Getenv("GOGC") == "" { // as rolloutd export does
			debug.SetGCPercent(export.GCPercent)
		}
		s, err := localstore.Open(dir)
		if err != nil {
			return result{}, err
		}
		defer s.Close()
		start := time.Now()
		d, err := export.OpenDir(out)
		if err != nil {
			return result{}, err
		}
		defer d.Close()
		sum, err := export.Run(ctx, export.Options{Source: export.NewStoreSource(s), Dest: d, Compression: export.Compression(compression)})
		if err != nil {
			return result{}, err
		}
		secs := time.Since(start).Seconds()
		var size int64
		err = filepath.Walk(out, func(_ string, fi os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(fi.Name(), ".parquet") {
				size += fi.Size()
			}
			return err
		})
		return result{Seconds: secs, Records: sum.Records, Bytes: size}, err
	}
	return result{}, fmt.Errorf("unknown phase %q", phase)
}

// gen appends n records and returns the bytes of the shard's generation
// blobs once its writer has merged and closed.
func gen(ctx context.Context, dir string, n int) (result, error) {
	s, err := localstore.Open(dir)
	if err != nil {
		return result{}, err
	}
	defer s.Close()
	start := time.Now()
	w, err := shard.Open(ctx, s, shardName, shard.Options{})
	if err != nil {
		return result{}, err
	}
	g := synth.New(1, 1024)
	const batch = 500
	for i := 0; i < n; i += batch {
		var entries []shard.Entry
		for range min(batch, n-i) {
			e, err := shard.Prepare(g.Record(), time.Now())
			if err != nil {
				return result{}, err
			}
			entries = append(entries, e)
		}
		if _, err := w.Append(ctx, entries); err != nil {
			return result{}, err
		}
	}
	if err := w.Close(ctx); err != nil {
		return result{}, err
	}
	m, err := shard.NewReader(s, shard.ReaderOptions{}).Manifest(ctx, shardName)
	if err != nil {
		return result{}, err
	}
	var size int64
	for _, gen := range m.GetGenerations() {
		a, err := s.Head(ctx, format.GenerationName(shardName, gen.GetEpoch(), gen.GetNumber()))
		if err != nil {
			return result{}, err
		}
		size += a.Size
	}
	return result{Seconds: time.Since(start).Seconds(), Records: int64(n), Bytes: size}, nil
}

var (
	_ blob.Store = (*localstore.Store)(nil)
	_            = rolloutv1.Role_ROLE_USER
)
