package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// phaseResult is one phase's figures, as printed and as written by --json.
type phaseResult struct {
	Name        string  `json:"name"`
	Mode        string  `json:"mode"`
	Path        string  `json:"path"`
	Clients     int     `json:"clients"`
	Shards      int     `json:"shards"`
	Records     int     `json:"records_per_append"`
	RecordBytes int     `json:"record_bytes"`
	ElapsedSec  float64 `json:"elapsed_s"`
	Stopped     string  `json:"stopped,omitempty"`

	Appends       int64   `json:"appends"`
	AppendLatency latency `json:"append_latency"`
	AppendsPerSec float64 `json:"appends_per_s"`
	RecordsPerSec float64 `json:"records_per_s"`
	Gets          int64   `json:"gets"`
	GetLatency    latency `json:"get_latency"`
	GetsPerSec    float64 `json:"gets_per_s"`

	Errors      map[string]int64 `json:"errors_by_code"`
	ErrorsTotal int64            `json:"errors"`
	FirstErrors []string         `json:"first_errors,omitempty"`

	// Blob operations the phase caused, counted by blob/instrumented around
	// the store it drives (in-process) or scraped from the target's
	// /metrics; nil when unknown.
	BlobOps          map[string]float64 `json:"blob_ops,omitempty"`
	BlobOpsPerAppend *float64           `json:"blob_ops_per_append,omitempty"`
	WritesPerAppend  *float64           `json:"blob_writes_per_append,omitempty"`
	BlobOpsPerGet    *float64           `json:"blob_ops_per_get,omitempty"`
	BlobOpsPerSec    *float64           `json:"blob_ops_per_s,omitempty"`
	// HTTP requests and new TCP (+TLS) connections of the Azure clients,
	// below the SDK: retries and azure.New's container check included.
	HTTPRequests      *int64   `json:"http_requests,omitempty"`
	NewConns          *int64   `json:"new_connections,omitempty"`
	HTTPPerAppend     *float64 `json:"http_requests_per_append,omitempty"`
	NewConnsPerAppend *float64 `json:"new_connections_per_append,omitempty"`

	// Client TCP connections to the blob endpoint (this machine's, from
	// /proc/net/tcp{,6}): before the phase, at its end, and the most seen.
	Sockets *struct {
		Endpoint string  `json:"endpoint"`
		Before   sockets `json:"before"`
		End      sockets `json:"end"`
		Peak     sockets `json:"peak"`
	} `json:"sockets,omitempty"`

	// EmulatorCPUms is the CPU time Azurite (started by this run) spent,
	// per acked append (or per get): the emulator is single-threaded, so
	// this is what an operation costs it, background work included.
	EmulatorCPUms       *float64 `json:"emulator_cpu_ms,omitempty"`
	EmulatorCPUmsPerOp  *float64 `json:"emulator_cpu_ms_per_op,omitempty"`
	EmulatorUtilization *float64 `json:"emulator_utilization,omitempty"`

	// CPUusPerAppend is this process's CPU time (user and system) per
	// acked append, in µs, when the product path runs in it: clients,
	// gRPC, server, writers and store together (background work included).
	CPUusPerAppend *float64 `json:"cpu_us_per_append,omitempty"`

	RSSBytes        float64 `json:"rss_bytes,omitempty"`
	RSSQuarterBytes float64 `json:"rss_quarter_bytes,omitempty"`
	RSSSource       string  `json:"rss_source,omitempty"`
	Evictions       float64 `json:"writer_evictions"`
	WriterOpens     float64 `json:"writer_opens"`
	// LogFences is the fences written to shards' commit logs
	// (rolloutd_log_fences_total); nil when the server has no such counter.
	LogFences *float64 `json:"log_fences,omitempty"`
	// DeletesPerAppend is the blob DELETEs (GC) per acked append.
	DeletesPerAppend *float64 `json:"blob_deletes_per_append,omitempty"`
	// AllWritesPerAppend and AllDeletesPerAppend count the PUTs and
	// DELETEs of the phase's server from before its first block to a
	// settle after its last, per acked append: the background work between
	// blocks included (target 1's gRPC phase).
	AllWritesPerAppend  *float64 `json:"all_blob_writes_per_append,omitempty"`
	AllDeletesPerAppend *float64 `json:"all_blob_deletes_per_append,omitempty"`

	Notes []string `json:"notes,omitempty"`
}

func (p *phase) result() phaseResult {
	s := &p.spec
	el := p.elapsed.Seconds()
	r := phaseResult{
		Name: s.Name, Mode: s.Mode, Path: s.Path,
		Clients: s.Clients, Shards: len(s.Shards), Records: s.Records, RecordBytes: s.RecordBytes,
		ElapsedSec: el, Stopped: p.stopped,
		Appends: p.appends.Load(), AppendLatency: p.appendLat.summary(),
		Gets: p.gets.Load(), GetLatency: p.getLat.summary(),
		Errors: map[string]int64{}, FirstErrors: p.firstErrs, Notes: p.notes,
	}
	if el > 0 {
		r.AppendsPerSec = float64(r.Appends) / el
		r.RecordsPerSec = float64(p.records.Load()) / el
		r.GetsPerSec = float64(r.Gets) / el
	}
	for k, v := range p.errs {
		r.Errors[k] = v
		r.ErrorsTotal += v
	}
	if p.haveFigs {
		r.BlobOps = p.figures.BlobOps
		ops, writes := p.figures.ops(), p.figures.writes()
		if r.Appends > 0 {
			r.BlobOpsPerAppend = ptr(ops / float64(r.Appends))
			r.WritesPerAppend = ptr(writes / float64(r.Appends))
			r.DeletesPerAppend = ptr(p.figures.deletes() / float64(r.Appends))
		} else if r.Gets > 0 {
			r.BlobOpsPerGet = ptr(ops / float64(r.Gets))
		}
		if el > 0 {
			r.BlobOpsPerSec = ptr(ops / el)
		}
		r.Evictions, r.WriterOpens = p.figures.Evictions, p.figures.Opens
		if p.figures.FencesKnown {
			r.LogFences = ptr(p.figures.Fences)
		}
	}
	if p.haveEmu {
		r.EmulatorCPUms = ptr(p.emuCPU * 1000)
		if n := r.Appends + r.Gets; n > 0 {
			r.EmulatorCPUmsPerOp = ptr(p.emuCPU * 1000 / float64(n))
		}
		if el > 0 {
			r.EmulatorUtilization = ptr(p.emuCPU / el)
		}
	}
	if p.all != nil && r.Appends > 0 {
		r.AllWritesPerAppend = ptr(p.all.writes() / float64(r.Appends))
		r.AllDeletesPerAppend = ptr(p.all.deletes() / float64(r.Appends))
	}
	if p.b.cfg.InProcess && r.Appends > 0 {
		r.CPUusPerAppend = ptr(p.cpu * 1e6 / float64(r.Appends))
	}
	if s.HTTP != nil {
		r.HTTPRequests, r.NewConns = ptr(p.http.requests), ptr(p.http.conns)
		if r.Appends > 0 {
			r.HTTPPerAppend = ptr(float64(p.http.requests) / float64(r.Appends))
			r.NewConnsPerAppend = ptr(float64(p.http.conns) / float64(r.Appends))
		}
	}
	if p.haveSock {
		r.Sockets = &struct {
			Endpoint string  `json:"endpoint"`
			Before   sockets `json:"before"`
			End      sockets `json:"end"`
			Peak     sockets `json:"peak"`
		}{p.b.ep.String(), p.sockBase, p.sockEnd, p.sockPeak}
	}
	if s.RSS != nil {
		r.RSSBytes, r.RSSQuarterBytes = p.rssEnd, p.rssQ
		r.RSSSource = "in-process: /proc/self/status VmRSS (server and bench together)"
		if p.b.scrape != nil && s.Mode == modeResident && p.b.target != nil {
			r.RSSSource = "target: process_resident_memory_bytes"
		}
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// printPhases writes the summary table.
func printPhases(w io.Writer, rs []phaseResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tclients\tshards\tappends\tp50\tp90\tp99\tmax\tappends/s\tgets\tget p50\tblob ops/append\twrites/append\tHTTP req/append\tnew conns/append\temulator CPU/op\tCPU/append\tTIME_WAIT\tESTAB\tsvc TIME_WAIT\tRSS\terrors\t")
	for _, r := range rs {
		tw.Write([]byte(strings.Join([]string{
			r.Name, fmt.Sprint(r.Clients), fmt.Sprint(r.Shards), fmt.Sprint(r.Appends),
			ms(r.AppendLatency.P50ms), ms(r.AppendLatency.P90ms), ms(r.AppendLatency.P99ms), ms(r.AppendLatency.MaxMs),
			fmt.Sprintf("%.0f", r.AppendsPerSec), fmt.Sprint(r.Gets), ms(r.GetLatency.P50ms),
			opt(r.BlobOpsPerAppend, r.BlobOpsPerGet), opt(r.WritesPerAppend, nil), opt(r.HTTPPerAppend, nil), opt(r.NewConnsPerAppend, nil),
			emuCol(r), cpuCol(r),
			sockCol(r, func(s sockets) int { return s.TimeWait }), sockCol(r, func(s sockets) int { return s.Established }),
			sockCol(r, func(s sockets) int { return s.ServerTimeWait }),
			mib(r.RSSBytes), errCol(r),
		}, "\t") + "\t\n"))
	}
	tw.Flush()
	for _, r := range rs {
		fmt.Fprintf(w, "  %s: %s", r.Name, r.Path)
		if r.Sockets != nil {
			fmt.Fprintf(w, " [sockets: toward %s]", r.Sockets.Endpoint)
		}
		if r.Stopped != "" {
			fmt.Fprintf(w, " [stopped: %s]", r.Stopped)
		}
		fmt.Fprintln(w)
		for _, e := range r.FirstErrors {
			fmt.Fprintf(w, "      first error: %s\n", e)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(w, "      note: %s\n", n)
		}
	}
}

func ms(v float64) string {
	if v == 0 {
		return "-"
	}
	if v < 1 {
		return fmt.Sprintf("%.0fµs", v*1000)
	}
	if v < 10 {
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.1fms", v)
}

func opt(v, alt *float64) string {
	switch {
	case v != nil:
		return fmt.Sprintf("%.3g", *v)
	case alt != nil:
		return fmt.Sprintf("%.3g/get", *alt)
	}
	return "-"
}

func mib(b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fMiB", b/(1<<20))
}

// sockCol shows the phase's TIME_WAIT (or ESTABLISHED) as its peak and the
// count it started with: "peak (+before)".
func sockCol(r phaseResult, f func(sockets) int) string {
	if r.Sockets == nil {
		return "-"
	}
	return fmt.Sprintf("%d (was %d)", f(r.Sockets.Peak), f(r.Sockets.Before))
}

func emuCol(r phaseResult) string {
	if r.EmulatorCPUmsPerOp == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fms", *r.EmulatorCPUmsPerOp)
}

func cpuCol(r phaseResult) string {
	if r.CPUusPerAppend == nil {
		return "-"
	}
	return fmt.Sprintf("%.0fµs", *r.CPUusPerAppend)
}

func errCol(r phaseResult) string {
	if r.ErrorsTotal == 0 {
		return "0"
	}
	var parts []string
	for _, k := range sortedKeys(r.Errors) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, r.Errors[k]))
	}
	return strings.Join(parts, " ")
}

// machine describes where the run ran.
type machine struct {
	GOOS       string  `json:"goos"`
	GOARCH     string  `json:"goarch"`
	NumCPU     int     `json:"num_cpu"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	GoVersion  string  `json:"go_version"`
	CPUModel   string  `json:"cpu_model,omitempty"`
	Kernel     string  `json:"kernel,omitempty"`
	LoadAvg    string  `json:"loadavg_at_start,omitempty"`
	MemTotalGB float64 `json:"mem_total_gib,omitempty"`
}

func describeMachine() machine {
	m := machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemTotalGB = kb / (1 << 20)
		}
	}
	return m
}

// report is what --json writes.
type report struct {
	Started     time.Time     `json:"started"`
	Command     []string      `json:"command"`
	Machine     machine       `json:"machine"`
	Store       string        `json:"store"`
	Target      string        `json:"target"`
	Phases      []phaseResult `json:"phases"`
	Targets     []targetCheck `json:"targets,omitempty"`
	Diagnostics []string      `json:"diagnostics,omitempty"`
	Ratios      []modeRatio   `json:"ratios,omitempty"`
	Duration    float64       `json:"duration_s"`
}

// modeRatio compares a mode with the floor of the same run (mode runs).
type modeRatio struct {
	Mode         string  `json:"mode"`
	P50VsFloor   float64 `json:"p50_vs_floor"`
	P99VsFloor   float64 `json:"p99_vs_floor"`
	RateVsFloor  float64 `json:"appends_per_s_vs_floor"`
	GetP50VsRead float64 `json:"get_p50_vs_read_floor,omitempty"`
}

func writeJSON(path string, r *report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
