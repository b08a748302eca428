package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// targetCheck is one target of docs/performance.md's targets table, measured.
type targetCheck struct {
	ID     string   `json:"id"`
	What   string   `json:"what"`
	Value  *float64 `json:"value,omitempty"` // nil: not measured in this run
	Op     string   `json:"op"`              // "<=", ">=", ">", "=="
	Want   float64  `json:"want"`
	Met    *bool    `json:"met,omitempty"`
	Detail string   `json:"detail,omitempty"`
}

func check(id, what string, v float64, op string, want float64, detail string) targetCheck {
	t := targetCheck{ID: id, What: what, Op: op, Want: want, Detail: detail}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		t.Detail = strings.TrimSpace("not measurable (" + fmt.Sprint(v) + "). " + detail)
		return t
	}
	t.Value = &v
	var met bool
	switch op {
	case "<=":
		met = v <= want
	case ">=":
		met = v >= want
	case ">":
		met = v > want
	case "==":
		met = v == want
	}
	t.Met = &met
	return t
}

// reported is a figure the targets' table shows without a bound; a nil
// value prints as n/a.
func reported(id, what string, v float64, detail string) targetCheck {
	t := targetCheck{ID: id, What: what, Op: "report", Detail: detail}
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		t.Value = &v
	}
	return t
}

func skipped(id, what, op string, want float64, why string) targetCheck {
	return targetCheck{ID: id, What: what, Op: op, Want: want, Detail: "not measured: " + why}
}

// resident is the product path over gRPC for one phase: an in-process
// server of its own over the shared store, or the remote --target.
type resident struct {
	conn    *client.Client
	figures func() (serverFigures, error)
	rss     func() float64
	path    string
	stop    func()
}

func (b *bench) resident(store blob.Store, maxWriters int, target *client.Client) (*resident, error) {
	return b.residentWith(store, maxWriters, target, shard.Options{})
}

// residentWith is resident with writer options other than rolloutd's
// defaults (in-process only: a remote target has its own).
func (b *bench) residentWith(store blob.Store, maxWriters int, target *client.Client, wopts shard.Options) (*resident, error) {
	if b.cfg.Target != "" {
		r := &resident{conn: target, stop: func() {}, path: "remote rolloutd " + b.cfg.Target + " over gRPC (Go client package, retries off)"}
		if target == b.getTarget && b.cfg.GetTarget != "" {
			r.path = "remote rolloutd " + b.cfg.GetTarget + " over gRPC (Go client package, retries off)"
		}
		if b.scrape != nil {
			r.figures = func() (serverFigures, error) { return figuresOf(b.scrape) }
			r.rss = func() float64 {
				f, err := figuresOf(b.scrape)
				if err != nil {
					return 0
				}
				return f.RSS
			}
		}
		return r, nil
	}
	s, err := b.startServer(store, maxWriters, wopts)
	if err != nil {
		return nil, err
	}
	return &resident{
		conn: s.conn, figures: s.figures, rss: selfRSS, stop: s.stop,
		path: fmt.Sprintf("in-process rolloutd server (internal/server, max-writers %d) over loopback gRPC (Go client package, retries off), on %s", maxWriters, b.storeDesc),
	}, nil
}

func (b *bench) base() string { return "rb-" + b.runID }

func (b *bench) spec(name, mode, path string, clients int, shards []string) loadSpec {
	return loadSpec{Name: name, Mode: mode, Path: path, Clients: clients, Shards: shards, Records: 1, RecordBytes: len(b.content)}
}

// warm runs n operations of each phase and forgets their figures: writers
// open, connections pool, caches fill.
func warm(ctx context.Context, n int64, ps ...*phase) {
	for _, p := range ps {
		p.run(ctx, n, 0)
		p.reset()
	}
}

// interleave runs the phases' count operations each in rounds, rotating
// their order, so that the machine's noise falls on all of them alike.
//
// Blocks are several operations long, with a pause between them, and not
// one operation each: a resident writer merges in the background after its
// commits, and with strict alternation that work lands on whatever runs
// next. On Azurite, which serves one request at a time, the floor then pays
// for the writer's merges (measured here: single-client resident/floor
// 1.06 with one-operation blocks against 2.87 with ten-operation blocks in
// back-to-back runs), which flatters the writer.
func interleave(ctx context.Context, count int64, rounds int, ps ...*phase) {
	rounds = max(1, min(rounds, int(count)))
	for r := range rounds {
		n := count / int64(rounds)
		if r < int(count%int64(rounds)) {
			n++
		}
		for k := range ps {
			ps[(k+r)%len(ps)].run(ctx, n, 0)
			pause(ctx, blockGap)
		}
	}
}

// blockGap lets the background work a block started (merges) finish
// before the next block, of another phase, starts.
const blockGap = 50 * time.Millisecond

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func p50(r phaseResult) float64    { return r.AppendLatency.P50ms }
func getP50(r phaseResult) float64 { return r.GetLatency.P50ms }

// A target is one group of rows of docs/performance.md's targets table:
// the phases that measure it and the rows that read their results.
type target struct {
	id     string   // as --targets names it
	checks []string // the ids of the rows (checks) it reports, in the table's order
	// run measures the target. Its rows read the typed results of the
	// phases it ran, never phases found by their labels.
	run func(ctx context.Context, b *bench) (*outcome, error)
}

// outcome is what a target measured.
type outcome struct {
	phases []phaseResult // in the order they ran
	rows   []targetCheck
	// late, when set, measures the rest once every selected target has
	// run: per-append phases, whose TIME_WAIT sockets outlive them by a
	// minute and would count against the resident phases.
	late func(ctx context.Context) (*outcome, error)
}

// targetTable is the targets --compare measures, in the order it runs them.
var targetTable = []target{
	{"1", []string{"1a", "1b", "1c", "1d", "1e", "1f", "1g"}, runTarget1},
	{"2", []string{"2"}, runTarget2},
	{"3", []string{"3a", "3b", "3c", "3d", "3e"}, runTarget3},
	{"4", []string{"4a", "4b", "4c", "4d"}, runTarget4},
	{"5", []string{"5", "5b", "5c"}, runTarget5},
	{"6", []string{"6a", "6b", "6c"}, runTarget6},
	{"7", []string{"7a", "7b", "7c", "7d", "7e", "7f", "7g"}, runTarget7},
	{"8", []string{"8a1", "8a2", "8b", "8c", "8d"}, runTarget8},
}

// targetIDs are the ids --targets accepts, in the table's order.
func targetIDs() []string {
	ids := make([]string, len(targetTable))
	for i, t := range targetTable {
		ids[i] = t.id
	}
	return ids
}

// errRows: a target reported rows that are not its own (order). The run's
// phases were measured all the same, so its report is still written; the
// run fails after.
var errRows = errors.New("bench bug")

// compareRun runs the selected targets in the table's order, then their
// late phases in the same order, and returns every phase's result and
// the targets' rows in the table's order. If a target's rows are wrong, the
// error (errRows, naming each such target) comes with every phase and the
// rows as the targets reported them: nothing measured is lost.
func (b *bench) compareRun(ctx context.Context) ([]phaseResult, []targetCheck, error) {
	b.diagnostics = nil
	var results []phaseResult
	rows := map[string][]targetCheck{}
	type late struct {
		id  string
		run func(context.Context) (*outcome, error)
	}
	var lates []late
	for _, t := range targetTable {
		if !b.want(t.id) {
			continue
		}
		o, err := t.run(ctx, b)
		if err != nil {
			return nil, nil, err
		}
		results, rows[t.id] = append(results, o.phases...), append(rows[t.id], o.rows...)
		if o.late != nil {
			lates = append(lates, late{t.id, o.late})
		}
	}
	for _, l := range lates {
		o, err := l.run(ctx)
		if err != nil {
			return nil, nil, err
		}
		results, rows[l.id] = append(results, o.phases...), append(rows[l.id], o.rows...)
	}
	var checks []targetCheck
	var bad []error
	for _, t := range targetTable {
		if !b.want(t.id) {
			continue
		}
		cs, err := t.order(rows[t.id])
		if err != nil {
			bad = append(bad, err)
			cs = rows[t.id]
		}
		checks = append(checks, cs...)
	}
	if len(bad) > 0 {
		return results, checks, fmt.Errorf("%w: %w", errRows, errors.Join(bad...))
	}
	return results, checks, nil
}

// order puts the rows a run of t reported in the order of t.checks. A row
// missing, reported twice or not t's is a bench bug, and an error: every
// row is measured or says why not, and never drops out silently.
func (t target) order(cs []targetCheck) ([]targetCheck, error) {
	byID := map[string]targetCheck{}
	for _, c := range cs {
		if !slices.Contains(t.checks, c.ID) {
			return nil, fmt.Errorf("target %s reported row %q, which is not one of its rows %v", t.id, c.ID, t.checks)
		}
		if _, dup := byID[c.ID]; dup {
			return nil, fmt.Errorf("target %s reported row %s twice", t.id, c.ID)
		}
		byID[c.ID] = c
	}
	out := make([]targetCheck, 0, len(t.checks))
	for _, id := range t.checks {
		c, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("target %s did not report row %s", t.id, id)
		}
		out = append(out, c)
	}
	return out, nil
}

// want reports whether --targets selects target id.
func (b *bench) want(id string) bool {
	return len(b.cfg.Targets) == 0 || slices.Contains(b.cfg.Targets, id)
}

// phaseSet owns the phases a target makes: close closes every one.
type phaseSet struct {
	b  *bench
	ps []*phase
}

func (s *phaseSet) add(spec loadSpec) (*phase, error) {
	p, err := s.b.newPhase(spec)
	if err == nil {
		s.ps = append(s.ps, p)
	}
	return p, err
}

func (s *phaseSet) close() {
	for _, p := range s.ps {
		p.close()
	}
}

// resultOf is p's result, or nil when the phase did not run.
func resultOf(p *phase) *phaseResult {
	if p == nil {
		return nil
	}
	r := p.result()
	return &r
}

// floorFor prepares floor blobs under prefix: a generation of one append
// and the manifest of refShard as it is now (or a fresh one).
func (b *bench) floorFor(ctx context.Context, prefix, refShard string) (*floorSpec, error) {
	gen, err := generationBlob(b.base()+"/floor", []*rolloutv1.Record{b.newRecord(0)})
	if err != nil {
		return nil, err
	}
	fs := &floorSpec{prefix: prefix, generation: gen}
	if refShard != "" {
		if m, _, err := b.store.Get(ctx, format.ManifestName(refShard), blob.GetOptions{}); err == nil {
			fs.manifest = m
		}
	}
	if fs.manifest == nil {
		if fs.manifest, err = freshManifest(); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

func (b *bench) perAppendPath() string {
	if b.cfg.store.Kind == "azblob" {
		return "azure.New (a new http.Transport and client; its container check included) → shard.Open (claims an epoch) → Append → Close → Store.Close (drops the transport), on " + b.storeDesc
	}
	return "shard.Open (claims an epoch) → Append → Close on the shared " + b.storeDesc + " (no transport to rebuild: a local store opens once per process)"
}

// printChecks writes the targets' table.
func printChecks(w io.Writer, cs []targetCheck) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\twhat\tmeasured\twant\tverdict\tdetail")
	for _, c := range cs {
		v, verdict := "-", "not measured"
		if c.Value != nil {
			v = fmt.Sprintf("%.3g", *c.Value)
		}
		if c.Met != nil {
			verdict = map[bool]string{true: "met", false: "MISSED"}[*c.Met]
		}
		want := fmt.Sprintf("%s %g", c.Op, c.Want)
		if c.Op == "report" {
			want, verdict = "-", map[bool]string{true: "reported", false: "n/a"}[c.Value != nil]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.What, v, want, verdict, c.Detail)
	}
	tw.Flush()
}

// putsDetail describes a phase's blob writes: PUTs by kind and DELETEs.
func putsDetail(ops map[string]float64, appends int64, how string) string {
	d := fmt.Sprintf("%.0f PUTs (%.0f create-only, %.0f CAS, %.0f plain) and %.0f DELETEs for %d appends",
		ops["put"]+ops["put_create"]+ops["put_cas"], ops["put_create"], ops["put_cas"], ops["put"], ops["delete"], appends)
	if appends > 0 {
		d += fmt.Sprintf(" (%.3f DELETEs per append)", ops["delete"]/float64(appends))
	}
	if how != "" {
		d += "; " + how
	}
	return d
}
