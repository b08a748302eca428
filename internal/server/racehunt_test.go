package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/clock"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// TestRaceHunter drives two writer sets (two rolloutd instances) and raw
// shard writers (a third instance) over one fault-injecting store, with
// random interleavings of everything that can happen at once:
//
//   - appends with random deadlines, many of them cancelled while queued or
//     while their commit is in flight, in steady streams and in bursts of
//     hundreds queued behind one commit held in its generation PUT;
//   - other instances claiming the same shard (fences), evictions from LRUs
//     of one or two writers over three shards, shutdowns (closeAll with a
//     short deadline, which aborts what it cannot flush), Abort, Close and
//     dropped writer handles (the runtime.AddCleanup path);
//   - lost, delayed and hung manifest CAS responses and re-reads, failed
//     reads, and merges and GC running all the time;
//   - ids shared by concurrent appends and by retries, and "conflict ids"
//     (the only ids appended with two different contents), also in storms
//     that leave a writer's manifest stale behind a commit of unknown
//     outcome and then send appends that share ids with it.
//
// Beside that chaos, four fault families run their scenarios, one at a
// time each (racehunt_scenarios_test.go). They came from a review that
// found four bugs the chaos above had missed; each checks its invariant as
// it goes, and a violation names its family and finding:
//
//   - partition (finding 1): on hunt/p0, which the chaos leaves alone (its
//     claims would replace a wedged writer), an instance of its own, holding
//     a writer of every shard, appends while either the shard's log names
//     (for every instance) or all of the instance's store traffic are cut
//     off for 2–3 × CommitTimeout (calls fail, lose their answer, or hang;
//     faultstore.Partitioned), then heal. Every writer's CommitTimeout is
//     200 ms for this. Invariant: within 5 s of the heal an append to the
//     shard succeeds on the same writer set: no shard stays wedged.
//   - latefence (finding 2): on hunt/f0, which the chaos leaves alone so
//     that merges and GC get to collect, an instance of its own appends
//     and reads the acknowledged records back through its BatchGet and Get
//     handlers, whose reader shares the writers' cache; meanwhile another
//     instance claims the shard with its fence create held on the way until
//     its position was written and then collected by merge and GC (or for
//     a random while). Record reads of the shard's log wait for that late
//     fence (or up to their deadline): reads slower than the retire grace.
//     Invariants: no read answers DATA_LOSS (no blob is ever corrupted),
//     and every acknowledged record is found, at its seq.
//   - delete (finding 3): appends to hunt/d0 (fresh ids only) through both
//     instances, then DeleteShard with expected_last_seq, usually with the
//     tombstone CAS's answer lost and the deleter's re-read slowed while the
//     writers the delete fenced heal into the next incarnation. Invariant:
//     the answer matches the store: "nothing deleted" (SEQ_MISMATCH) only if
//     the incarnation is still there, "deleted" only if it is gone, and no
//     record of a deleted incarnation is live at the end.
//   - lagbound (finding 4): on hunt/l0 (no chaos there either), a writer
//     with K = 2 whose checkpoint CAS is slow (and sometimes loses its
//     answer), so that commits wait at the 2K lag bound, is taken over by
//     another instance: its checkpoint loses and it stops. Invariant: no
//     append is answered more than 700 ms after its writer stopped (its
//     CommitTimeout is 1 s).
//
// ROLLOUTD_HUNT_ONLY=partition|latefence|delete|lagbound (a comma-separated
// list; "none" for the chaos alone) runs only those families, to measure
// one alone.
//
// After every run it checks these invariants (racehunt_ledger_test.go):
//
//   - no panic: a panic on an appender's goroutine is recovered and reported
//     (the server's interceptor would turn it into Internal); a panic on a
//     writer's own goroutine kills the test binary, which is why the seed
//     is printed to stderr before each run;
//   - every acknowledged record is stored exactly once, at its seq, with its
//     content, and reads back through a fresh Reader on the fault-free store,
//     unless a delete answered that it deleted its incarnation;
//   - no record is stored that every Append carrying it was told was not
//     committed (see huntLedger.check for how shared ids count);
//   - ErrIDConflict (ALREADY_EXISTS) only for an append carrying a conflict id;
//   - no data race (run it with -race), and no goroutine leaked.
//
// Runs are seeded: run i uses seed base+i, and each is printed before it
// starts. ROLLOUTD_HUNT_SEED=<seed> starts from that seed, replaying the same
// random choices: the same faults armed, the same bursts, ids, deadlines
// and chaos. Goroutine interleavings cannot be replayed, so a replay
// explores the same scenario, not the same schedule; a failure that needs
// a rare schedule may take a few replays (or a soak from that seed).
//
// ROLLOUTD_HUNT_DURATION bounds the whole test (default 30s; -short 5s).
// ROLLOUTD_HUNT_SOAK=10m soaks instead. ROLLOUTD_HUNT_RUNS=1 stops after
// that many runs. The hunter stops at the first failing run, unless
// ROLLOUTD_HUNT_KEEP_GOING=1 asks it to go on and show all that the budget
// finds.
func TestRaceHunter(t *testing.T) {
	budget := 30 * time.Second
	if testing.Short() {
		budget = 5 * time.Second
	}
	budget = envDuration(t, "ROLLOUTD_HUNT_DURATION", budget)
	budget = envDuration(t, "ROLLOUTD_HUNT_SOAK", budget)
	seed := time.Now().UnixNano() % 1_000_000_000
	if s := os.Getenv("ROLLOUTD_HUNT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("ROLLOUTD_HUNT_SEED=%q: %v", s, err)
		}
	}
	maxRuns := 0
	if s := os.Getenv("ROLLOUTD_HUNT_RUNS"); s != "" {
		maxRuns, _ = strconv.Atoi(s)
	}
	keepGoing := os.Getenv("ROLLOUTD_HUNT_KEEP_GOING") != ""
	fams, err := huntFamiliesFromEnv(os.Getenv("ROLLOUTD_HUNT_ONLY"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; maxRuns == 0 || i < maxRuns; i++ {
		left := budget - time.Since(start)
		if left < huntRunFloor {
			break
		}
		s := seed + int64(i)
		fmt.Fprintf(os.Stderr, "race hunter: seed %d at %.1fs (replay: ROLLOUTD_HUNT_SEED=%d go test -race -run TestRaceHunter ./internal/server/)\n",
			s, time.Since(start).Seconds(), s)
		ok := t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			hunt(t, s, min(huntRunLength, left-huntRunSlack), fams)
		})
		if !ok {
			fmt.Fprintf(os.Stderr, "race hunter: seed %d failed, %.1fs after the hunt began\n", s, time.Since(start).Seconds())
			if !keepGoing {
				return
			}
		}
	}
}

const (
	huntRunLength = 3 * time.Second         // chaos per run
	huntRunSlack  = 2500 * time.Millisecond // a run's setup, scenario tails, shutdown and checks
	huntRunFloor  = huntRunSlack + time.Second
	huntShards    = 3
	// huntCommitTimeout is every hunted writer's CommitTimeout, short so
	// that a partition longer than it fits in a run.
	huntCommitTimeout = 200 * time.Millisecond
)

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return d
}

// huntAppend is the append path of the Append handler, called directly for
// throughput. It recovers a panic, as the handler's interceptor does.
func huntAppend(ctx context.Context, svc *service, shardName string, entries []shard.Entry) (rs []shard.Result, err error) {
	defer huntRecover(&err)
	return svc.writers.append(ctx, shardName, entries)
}

// huntRawAppend appends through a raw writer, recovering a panic.
func huntRawAppend(ctx context.Context, w *shard.Writer, entries []shard.Entry) (rs []shard.Result, err error) {
	defer huntRecover(&err)
	return w.Append(ctx, entries)
}

func huntRecover(err *error) {
	if p := recover(); p != nil {
		*err = &huntPanic{value: p, stack: string(debug.Stack())}
	}
}

// huntRand is a seeded generator shared by goroutines.
type huntRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (r *huntRand) intN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.IntN(n)
}

// chance is true with probability p.
func (r *huntRand) chance(p float64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64() < p
}

// between returns a duration in [lo, hi).
func (r *huntRand) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.intN(int(hi-lo)))
}

// hunter is one run.
type hunter struct {
	t     *testing.T
	seed  int64
	rng   *huntRand
	fs    *faultstore.Store
	inner *memstore.Store
	// part is the store every instance uses: fs behind a partition that
	// can cut the names of a shard off for all of them.
	part *faultstore.Partitioned
	fams huntFamilies
	end  time.Time // when the chaos stops
	l    *huntLedger
	v    *huntViolations
	stop chan struct{}
	work sync.WaitGroup // every appender, burst and chaos action

	mu    sync.Mutex
	insts [2]*service
	sets  []*writerSet // every writer set started, for the final shutdown
	views map[*service]*huntViews
	raw   []*shard.Writer // third-instance writers still held
	next  atomic.Int64    // fresh id counter
	round atomic.Int64    // names the current pools of shared and conflict ids
	stats map[string]int  // chaos actions taken
}

func hunt(t *testing.T, seed int64, length time.Duration, fams huntFamilies) {
	leaks := goleak.IgnoreCurrent()
	v := &huntViolations{}
	h := &hunter{
		t:     t,
		seed:  seed,
		rng:   &huntRand{r: rand.New(rand.NewPCG(uint64(seed), 0x68756e74))},
		inner: memstore.New(),
		l:     newHuntLedger(v),
		v:     v,
		stop:  make(chan struct{}),
		stats: map[string]int{},
		fams:  fams,
		end:   time.Now().Add(length),
		views: map[*service]*huntViews{},
	}
	h.fs = faultstore.New(h.inner, seed)
	h.part = faultstore.NewPartitioned(h.fs)
	h.addFaults()
	for i := range h.insts {
		h.insts[i] = h.startInstance(h.part, 1+h.rng.intN(2))
	}

	for c := range 6 {
		h.work.Go(func() { h.steadyClient(c) })
	}
	h.work.Go(h.chaos)
	for f := range numHuntFamilies {
		if fams[f] {
			h.work.Go(func() { h.family(f) })
		}
	}
	time.Sleep(length)
	close(h.stop)
	h.work.Wait()

	// Quiesce: no faults; shut every instance down; verify.
	h.fs.Clear()
	h.shutdown()
	stored := h.l.check(context.Background(), h.inner, h.shardNames())
	t.Logf("%s; %d records stored; chaos %v; injected: put %d, get %d",
		h.l.summary(), stored, h.stats, h.fs.Injected(faultstore.OpPut), h.fs.Injected(faultstore.OpGet))
	if p := h.part.Cuts(); p != 0 {
		v.add("%d partitions never healed", p)
	}
	if err := h.leakCheck(leaks); err != nil {
		v.add("goroutine leak: %v", err)
	}
	if v.any() {
		t.Errorf("race hunter: seed %d broke invariants (replay: ROLLOUTD_HUNT_SEED=%d go test -race -run TestRaceHunter ./internal/server/):\n\t%v", seed, seed, v)
	}
}

// leakCheck waits out dropped writers: their cleanup runs after a GC.
func (h *hunter) leakCheck(leaks goleak.Option) error {
	var err error
	for range 5 {
		runtime.GC()
		if err = goleak.Find(leaks); err == nil {
			return nil
		}
	}
	return err
}

func (h *hunter) shardNames() []string {
	names := make([]string, huntShards)
	for i := range names {
		names[i] = fmt.Sprintf("hunt/s%d", i)
	}
	return append(names, huntDeleteShard, huntFenceShard, huntPartitionShard, huntLagShard)
}

// pickShard picks a shard of the chaos; the delete and late-fence
// scenarios have their own.
func (h *hunter) pickShard() string { return fmt.Sprintf("hunt/s%d", h.rng.intN(huntShards)) }

// writerOptions make merges, folds and GC run all the time, commits short,
// and queues deep enough that bursts queue rather than bounce.
func (h *hunter) writerOptions(cache *shard.IndexCache) shard.Options {
	return shard.Options{
		Logger:              zap.NewNop(),
		Cache:               cache,
		RetryBackoff:        time.Millisecond,
		CommitTimeout:       huntCommitTimeout,
		CheckpointEvery:     4,
		CheckpointInterval:  50 * time.Millisecond,
		MaxQueuedBytes:      4 << 20,
		MaxGenerationBytes:  64 << 10,
		MergeRun:            3,
		MergeMaxGenerations: 6,
		MergeTierBytes:      4 << 10,
		MergeAge:            100 * time.Millisecond,
		MergeInterval:       5 * time.Millisecond,
		EditDelay:           10 * time.Millisecond,
		RetireGrace:         20 * time.Millisecond,
		OrphanScanInterval:  100 * time.Millisecond,
	}
}

// huntViews are one instance's own fault-injecting views of the store, in
// front of its reader and of its deletes: faults armed there hit only that
// instance's reads, or its DeleteShard calls.
type huntViews struct {
	reads, deletes *faultstore.Store
	purger         *shard.Purger
}

// startInstance starts one rolloutd instance's writer set over store, an
// LRU of lru writers (one or two over three shards, so that appends evict),
// and its reader, which shares the writers' cache, as in server.New.
func (h *hunter) startInstance(store blob.Store, lru int) *service {
	cache := shard.NewIndexCache(4 << 20)
	opts := h.writerOptions(cache)
	open := func(ctx context.Context, shardName string) (*shard.Writer, error) {
		return shard.Open(ctx, store, shardName, opts)
	}
	m := NewMetrics()
	ws := newWriterSet(lru, open, time.Second, appendRetry{DefaultAppendAttempts, 2 * time.Millisecond}, zap.NewNop(), m)
	v := &huntViews{
		reads:   faultstore.New(store, int64(h.rng.intN(1<<30))),
		deletes: faultstore.New(store, int64(h.rng.intN(1<<30))),
		purger:  shard.NewPurger(store, 1, zap.NewNop()),
	}
	svc := &service{
		writers:         ws,
		reader:          shard.NewReader(v.reads, shard.ReaderOptions{Cache: cache}),
		clock:           clock.Real{},
		metrics:         m,
		maxBatchRecords: DefaultMaxBatchRecords,
		maxRecordBytes:  DefaultMaxRecordBytes,
		life:            lifecycle{store: v.deletes, purger: v.purger, log: zap.NewNop()},
	}
	h.mu.Lock()
	h.sets = append(h.sets, ws)
	h.views[svc] = v
	h.mu.Unlock()
	return svc
}

func (h *hunter) viewsOf(svc *service) *huntViews {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.views[svc]
}

func (h *hunter) instance(i int) *service {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.insts[i]
}

func (h *hunter) count(what string) {
	h.mu.Lock()
	h.stats[what]++
	h.mu.Unlock()
}

// addFaults arms the background faults: every call is sometimes slow or
// fails; generation PUTs are often slow, so appends queue; manifest CAS
// responses get lost; manifest reads fail (a re-read after a lost CAS then
// leaves the commit's outcome unknown) or hang past the commit timeout.
func (h *hunter) addFaults() {
	add := func(op faultstore.Op, prefix string, f faultstore.Fault, prob float64, d time.Duration) {
		h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{op}, Prefix: prefix, Fault: f, Prob: prob, Delay: d, Err: errInjected})
	}
	for _, op := range faultstore.Ops {
		add(op, "", faultstore.Delay, 0.2, 300*time.Microsecond)
	}
	for _, s := range h.shardNames() {
		gens, manifest, log := format.GenerationPrefix(s), format.ManifestName(s), format.LogPrefix(s)
		add(faultstore.OpPut, gens, faultstore.Delay, 0.3, h.rng.between(2*time.Millisecond, 15*time.Millisecond))
		// Protocol v2 commits by creating log positions: the same faults
		// as the manifest's, which v1 commits by.
		add(faultstore.OpPut, log, faultstore.Delay, 0.3, h.rng.between(2*time.Millisecond, 15*time.Millisecond))
		h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: log, Fault: faultstore.LoseResponse, Prob: 0.05})
		h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: log, Fault: faultstore.Fail, Prob: 0.02})
		add(faultstore.OpGet, log, faultstore.Fail, 0.02, 0)
		add(faultstore.OpPut, manifest, faultstore.Delay, 0.1, 2*time.Millisecond)
		add(faultstore.OpGet, manifest, faultstore.Delay, 0.1, time.Millisecond)
		h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: manifest, Fault: faultstore.LoseResponse, Prob: 0.05})
		h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: manifest, Fault: faultstore.Fail, Prob: 0.02})
		add(faultstore.OpGet, manifest, faultstore.Fail, 0.02, 0)
		add(faultstore.OpGet, manifest, faultstore.Hang, 0.003, 0)
		h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: gens, Fault: faultstore.Fail, Prob: 0.01})
	}
}

// errInjected is a storage failure of no retryable class: whoever meets it
// gives up at once.
var errInjected = fmt.Errorf("injected: internal server error")

// entry prepares the record the harness sends for (shard, id, variant).
// Only conflict ids are ever sent with variant 1.
func (h *hunter) entry(shardName, id string, variant int) shard.Entry {
	rec := &rolloutv1.Record{
		Id:        id,
		RolloutId: "hunt-" + id,
		Content:   fmt.Sprintf("%s/%s variant %d", shardName, id, variant),
	}
	e, err := shard.Prepare(rec, time.Unix(1_700_000_000, 0))
	if err != nil {
		panic(err) // static records always encode
	}
	return e
}

// idMix chooses what an append carries.
type idMix struct {
	shared, conflict float64 // chance of a shared id, of a conflict id, per record
	pool             int     // shared and conflict ids per round
}

// entries builds an append of 1–n records, mixing fresh ids, ids of the
// current shared pool (which concurrent appends carry too, same content)
// and conflict ids (sent with either content).
func (h *hunter) entries(shardName string, n int, mix idMix) []shard.Entry {
	k := 1 + h.rng.intN(n)
	round := h.round.Load()
	seen := map[string]bool{}
	var es []shard.Entry
	for range k {
		var id string
		variant := 0
		switch {
		case h.rng.chance(mix.conflict):
			id = fmt.Sprintf("k%d-%d", round, h.rng.intN(mix.pool))
			variant = h.rng.intN(2)
		case h.rng.chance(mix.shared):
			id = fmt.Sprintf("p%d-%d", round, h.rng.intN(mix.pool))
		default:
			id = fmt.Sprintf("f%d", h.next.Add(1))
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		es = append(es, h.entry(shardName, id, variant))
	}
	return es
}

// deadline returns an append's deadline: usually patient, often impatient
// enough to give up while queued or while its commit is in flight.
func (h *hunter) deadline() time.Duration {
	if h.rng.chance(0.3) {
		return h.rng.between(time.Millisecond, 30*time.Millisecond)
	}
	return h.rng.between(30*time.Millisecond, 600*time.Millisecond)
}

func (h *hunter) stopped() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

// steadyClient appends through either instance until the run stops, and
// retries an unanswered append with the same records now and then.
func (h *hunter) steadyClient(c int) {
	mix := idMix{shared: 0.15, conflict: 0.05, pool: 8}
	for !h.stopped() {
		s := h.pickShard()
		es := h.entries(s, 4, mix)
		for try := 0; try < 3 && !h.stopped(); try++ {
			ctx, cancel := context.WithTimeout(context.Background(), h.deadline())
			rs, err := huntAppend(ctx, h.instance(h.rng.intN(2)), s, es)
			cancel()
			h.answered(s, es, rs, err)
			if err == nil || !h.rng.chance(0.5) {
				break
			}
		}
		if c == 0 && h.rng.chance(0.02) {
			h.round.Add(1) // new pools of shared and conflict ids
		}
	}
}

func (h *hunter) answered(shardName string, es []shard.Entry, rs []shard.Result, err error) {
	if pe, ok := err.(*huntPanic); ok {
		h.v.add("append to %s of %v panicked: %v\n%s", shardName, entryIDs(es), pe.value, pe.stack)
	}
	h.l.answered(shardName, es, rs, err)
}

// chaos takes a random action every few milliseconds until the run stops.
func (h *hunter) chaos() {
	for !h.stopped() {
		time.Sleep(h.rng.between(2*time.Millisecond, 40*time.Millisecond))
		switch k := h.rng.intN(100); {
		case k < 25:
			h.burst()
		case k < 37:
			h.thirdInstance()
		case k < 45:
			h.restart(h.rng.intN(2))
		case k < 70:
			h.work.Go(h.conflictStorm)
		case k < 76:
			h.claim(h.pickShard(), "claim")
		}
	}
}

// hold delays the next commit PUT of shardName (the create of a log
// position, under protocol v2) by about d: that commit is held, and appends
// queue behind it.
func (h *hunter) hold(shardName string, d time.Duration) {
	h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: format.LogPrefix(shardName), Fault: faultstore.Delay, Count: 1, Delay: d})
}

// burst queues hundreds of appends on one instance's writer behind a held
// commit, with deadlines around the hold's end, and meanwhile, at a random
// moment, fences that writer (another instance claims the shard), shuts
// the instance down, or leaves it alone.
func (h *hunter) burst() {
	h.count("burst")
	i, s := h.rng.intN(2), h.pickShard()
	hold := h.rng.between(10*time.Millisecond, 80*time.Millisecond)
	h.hold(s, hold)
	svc := h.instance(i)
	n := 100 + h.rng.intN(400)
	mix := idMix{shared: 0.2, conflict: 0.02, pool: 16}
	for range n {
		es := h.entries(s, 3, mix)
		d := h.rng.between(hold/2, 2*hold)
		h.work.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			rs, err := huntAppend(ctx, svc, s, es)
			cancel()
			h.answered(s, es, rs, err)
		})
	}
	wait := h.rng.between(0, hold)
	switch k := h.rng.intN(10); {
	case k < 5:
		h.work.Go(func() { time.Sleep(wait); h.claim(s, "burst+claim") })
	case k < 7:
		h.work.Go(func() { time.Sleep(wait + hold/2); h.restart(i) })
	}
}

// claim opens a writer of shardName as another instance would, fencing
// whoever held it, and closes, aborts or drops it.
func (h *hunter) claim(shardName, why string) {
	h.count(why)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w, err := shard.Open(ctx, h.part, shardName, h.writerOptions(nil))
	if err != nil {
		return
	}
	h.release(w)
}

// release ends a third-instance writer one of four ways; dropping it leaves
// it to the runtime cleanup, which aborts it after a GC.
func (h *hunter) release(w *shard.Writer) {
	switch k := h.rng.intN(20); {
	case k < 9:
		w.Abort()
	case k < 18:
		ctx, cancel := context.WithTimeout(context.Background(), h.rng.between(time.Millisecond, 100*time.Millisecond))
		if err := w.Close(ctx); err != nil {
			w.Abort()
		}
		cancel()
	case k < 19:
		h.count("dropped")
	default:
		h.mu.Lock()
		h.raw = append(h.raw, w) // kept until the run ends
		h.mu.Unlock()
	}
}

// thirdInstance claims a shard with a raw writer, queues a burst of appends
// on it behind a held commit, and aborts, closes or drops it while they
// wait (or gets fenced by the other instances).
func (h *hunter) thirdInstance() {
	h.count("third")
	s := h.pickShard()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	w, err := shard.Open(ctx, h.part, s, h.writerOptions(nil))
	cancel()
	if err != nil {
		return
	}
	hold := h.rng.between(10*time.Millisecond, 80*time.Millisecond)
	h.hold(s, hold)
	n := 50 + h.rng.intN(300)
	mix := idMix{shared: 0.2, conflict: 0.02, pool: 16}
	var appenders sync.WaitGroup
	for range n {
		es := h.entries(s, 3, mix)
		d := h.rng.between(hold/2, 2*hold)
		appenders.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			rs, err := huntRawAppend(ctx, w, es)
			cancel()
			h.answered(s, es, rs, err)
		})
	}
	wait := h.rng.between(hold/2, 2*hold)
	h.work.Go(func() {
		time.Sleep(wait)
		h.release(w)
		appenders.Wait()
	})
}

// restart shuts instance i down with a short deadline (Close aborts what it
// cannot flush in time) and starts a new one in its place.
func (h *hunter) restart(i int) {
	h.count("restart")
	next := h.startInstance(h.part, 1+h.rng.intN(2))
	h.mu.Lock()
	old := h.insts[i]
	h.insts[i] = next
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), h.rng.between(time.Millisecond, 50*time.Millisecond))
	old.writers.closeAll(ctx)
	cancel()
	h.stopPurger(old)
}

// stopPurger stops an instance's purger once its writers are closed. A
// purge cut short is finished by the next delete, as in Server.Shutdown.
func (h *hunter) stopPurger(svc *service) {
	if v := h.viewsOf(svc); v != nil {
		v.purger.Close()
	}
}

// conflictStorm makes a writer's manifest stale with a commit whose outcome
// is unknown: its CAS lands, the response is lost, and the re-read fails.
// That commit carried conflict id k with one content. Then append P sends a
// shared id x and k with the other content: the writer cannot see that k is
// stored, so P is queued, and the commit that takes it resyncs (its manifest
// read is slowed down) and finds k committed. Meanwhile appends W1..Wn send
// x (the same content as P's) and a fresh id, and wait on P for x. Only P
// may get ErrIDConflict. A few looping appenders add retries of unanswered
// appends and more shared and conflict ids around it.
func (h *hunter) conflictStorm() {
	h.count("storm")
	i, s := h.rng.intN(2), h.pickShard()
	svc := h.instance(i)
	manifest := format.ManifestName(s)
	round := h.round.Add(1)
	k, x := fmt.Sprintf("k%d-s", round), fmt.Sprintf("p%d-s", round)
	variant := h.rng.intN(2)
	// Pin the shard's writer, as a long request would, so that eviction
	// does not replace the stale writer before P reaches it.
	held, err := svc.writers.acquire(context.Background(), s)
	if err != nil {
		return
	}
	var storm sync.WaitGroup
	defer func() { h.work.Go(func() { storm.Wait(); svc.writers.release(held) }) }()
	h.stormTraffic(svc, s)

	h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: manifest, Fault: faultstore.LoseResponse, Count: 1})
	h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: manifest, Fault: faultstore.Fail, Count: 1, Err: errInjected})
	if err := h.appendOnce(svc, s, []shard.Entry{h.entry(s, k, variant)}, 500*time.Millisecond); classifyAppend(err) != huntMaybe {
		return // the writer may not be stale: no use going on
	}
	h.count("storm-stale")

	h.fs.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: manifest, Fault: faultstore.Delay, Count: 1, Delay: h.rng.between(5*time.Millisecond, 20*time.Millisecond)})
	p := []shard.Entry{h.entry(s, x, 0), h.entry(s, k, 1-variant)}
	storm.Go(func() {
		if errors.Is(h.appendOnce(svc, s, p, 500*time.Millisecond), shard.ErrIDConflict) {
			h.count("storm-conflict")
		}
	})
	for range 2 + h.rng.intN(4) {
		time.Sleep(h.rng.between(0, 2*time.Millisecond))
		w := []shard.Entry{h.entry(s, x, 0), h.entry(s, fmt.Sprintf("f%d", h.next.Add(1)), 0)}
		storm.Go(func() { h.appendOnce(svc, s, w, 500*time.Millisecond) })
	}
}

// stormTraffic starts a few appenders that, for a moment, loop over appends
// of shared and conflict ids to one shard of one instance, and retry what
// was not acknowledged.
func (h *hunter) stormTraffic(svc *service, s string) {
	mix := idMix{shared: 0.6, conflict: 0.4, pool: 3}
	end := time.Now().Add(h.rng.between(50*time.Millisecond, 250*time.Millisecond))
	for range h.rng.intN(6) {
		h.work.Go(func() {
			for time.Now().Before(end) && !h.stopped() {
				es := h.entries(s, 2, mix)
				for try := 0; try < 2; try++ {
					if h.appendOnce(svc, s, es, h.rng.between(20*time.Millisecond, 300*time.Millisecond)) == nil {
						break
					}
				}
			}
		})
	}
}

// appendOnce sends one append through svc and records its answer.
func (h *hunter) appendOnce(svc *service, s string, es []shard.Entry, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rs, err := huntAppend(ctx, svc, s, es)
	h.answered(s, es, rs, err)
	return err
}

// shutdown stops every instance gracefully and aborts the third instance's
// writers, once all appends are answered.
func (h *hunter) shutdown() {
	h.mu.Lock()
	sets, raw, views := h.sets, h.raw, h.views
	h.sets, h.raw, h.views = nil, nil, nil
	h.mu.Unlock()
	for _, w := range raw {
		w.Abort()
	}
	for _, ws := range sets {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ws.closeAll(ctx)
		cancel()
	}
	for _, v := range views {
		v.purger.Close()
	}
}
