package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// serverFigures are the counters the bench reads from a server's metrics:
// its own registry in-process, or /metrics of a remote rolloutd. Both go
// through the same families, so the figures mean the same either way.
type serverFigures struct {
	// BlobOps counts blob operations by op ("get", "put_create", …), all
	// outcomes together (rolloutd_blob_operations_total).
	BlobOps   map[string]float64
	Evictions float64 // rolloutd_writer_evictions_total
	Opens     float64 // rolloutd_writer_opens_total
	// Fences counts the fence blobs written to shards' commit logs
	// (rolloutd_log_fences_total, issue 21); FencesKnown says whether the
	// server exports the counter at all (a protocol-v1 build does not).
	Fences      float64
	FencesKnown bool
	// RSS is process_resident_memory_bytes, when the server exports it.
	RSS float64
	// CacheBytes is the server's shared blob cache size, a gauge.
	CacheBytes float64
}

// since returns the counters' increase from before to f; RSS stays f's.
func (f serverFigures) since(before serverFigures) serverFigures {
	d := serverFigures{BlobOps: map[string]float64{}, RSS: f.RSS,
		Evictions: f.Evictions - before.Evictions, Opens: f.Opens - before.Opens,
		Fences: f.Fences - before.Fences, FencesKnown: f.FencesKnown}
	for op, n := range f.BlobOps {
		if v := n - before.BlobOps[op]; v != 0 {
			d.BlobOps[op] = v
		}
	}
	return d
}

func (f serverFigures) ops() float64 {
	var n float64
	for _, v := range f.BlobOps {
		n += v
	}
	return n
}

// writes counts the PUTs (generations, manifest CASes, merges, claims;
// with commit by create also log positions, fences and checkpoints).
func (f serverFigures) writes() float64 {
	return f.BlobOps["put"] + f.BlobOps["put_create"] + f.BlobOps["put_cas"]
}

// deletes counts the DELETEs (GC), which Azure does not bill.
func (f serverFigures) deletes() float64 { return f.BlobOps["delete"] }

func figuresOf(g prometheus.Gatherer) (serverFigures, error) {
	fams, err := g.Gather()
	if err != nil {
		return serverFigures{}, err
	}
	f := serverFigures{BlobOps: map[string]float64{}}
	for _, fam := range fams {
		switch fam.GetName() {
		case "rolloutd_blob_operations_total":
			for _, m := range fam.GetMetric() {
				f.BlobOps[label(m, "op")] += m.GetCounter().GetValue()
			}
		case "rolloutd_writer_evictions_total":
			f.Evictions = sum(fam)
		case "rolloutd_writer_opens_total":
			f.Opens = sum(fam)
		case "rolloutd_log_fences_total":
			f.Fences, f.FencesKnown = sum(fam), true
		case "process_resident_memory_bytes":
			f.RSS = sum(fam)
		case "rolloutd_index_cache_bytes":
			f.CacheBytes = sum(fam)
		}
	}
	return f, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func sum(fam *dto.MetricFamily) float64 {
	var n float64
	for _, m := range fam.GetMetric() {
		switch {
		case m.Counter != nil:
			n += m.GetCounter().GetValue()
		case m.Gauge != nil:
			n += m.GetGauge().GetValue()
		case m.Untyped != nil:
			n += m.GetUntyped().GetValue()
		}
	}
	return n
}

// scraper gathers a remote rolloutd's /metrics.
type scraper struct {
	url    string
	client *http.Client
}

var _ prometheus.Gatherer = (*scraper)(nil)

func (s *scraper) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", s.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.url, err)
	}
	fams := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		fams = append(fams, f)
	}
	return fams, nil
}

// selfRSS reads this process's resident set size (VmRSS) in bytes, or 0
// where /proc is missing.
func selfRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fs := strings.Fields(rest)
			if len(fs) >= 1 {
				kb, err := strconv.ParseFloat(fs[0], 64)
				if err == nil {
					return kb * 1024
				}
			}
		}
	}
	return 0
}

// emulatorCPU returns the CPU seconds used so far by the Azurite this
// process started (its child "node" processes), or -1 when there is none.
// USER_HZ is 100 on Linux.
func emulatorCPU() float64 {
	me := os.Getpid()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	total, found := 0.0, false
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: comm may hold spaces,
		// so split after its closing parenthesis.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 || s[open+1:end] != "node" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != me {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		total += (ut + st) / 100
		found = true
	}
	if !found {
		return -1
	}
	return total
}
