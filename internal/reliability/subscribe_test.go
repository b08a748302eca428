package reliability

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// subscribeSizes sizes one run of TestSubscribeDeliversEverythingAcked.
type subscribeSizes struct {
	shards    int           // shards under the prefix at the start
	appenders int           // appending clients
	run       time.Duration // how long the appenders append
	newEvery  time.Duration // a new shard under the prefix this often
	drain     time.Duration // bound on the wait for the last deliveries
	reported  time.Duration // bound on the wait for the deletion to be reported
}

// The shrunk run is part of make test; ROLLOUTD_SUBSCRIBE_LONG=1 runs the
// issue's full size.
var (
	subscribeShort = subscribeSizes{shards: 20, appenders: 4, run: 9 * time.Second, newEvery: time.Second, drain: 45 * time.Second, reported: 10 * time.Second}
	subscribeLong  = subscribeSizes{shards: 200, appenders: 32, run: 90 * time.Second, newEvery: 2 * time.Second, drain: 3 * time.Minute, reported: 30 * time.Second}
)

const (
	subPrefix   = "sub"
	subConsumer = "trainer"
	subMembers  = 2
)

// TestSubscribeDeliversEverythingAcked: three rolloutd processes on one
// Azurite container; appending clients (shard affinity across the three)
// record every ack and every append whose outcome they never learned;
// shards are created under the prefix while it runs and one is deleted;
// two members of one consumer (member 0 and 1 of 2) subscribe to the
// prefix and commit their positions every second. One member is killed (its
// subscription dropped without a commit, then started again from the
// consumer's positions), and separately one instance gets kill -9 and is
// restarted on its address. At the end:
//
//   - every record stored in a shard under the prefix (every acked one, and
//     every outcome-unknown one that landed, read straight from storage)
//     was delivered, with the content sent, and nothing else was: the
//     delivered seqs of each shard are exactly its stored ones (no gap);
//   - each subscription delivered each shard in increasing seq order;
//   - a record was delivered twice only inside the killed member's
//     uncommitted window (after the positions of its last commit);
//   - the members' shares are disjoint;
//   - the deleted shard was reported deleted, and its new incarnation's
//     records delivered after;
//   - nothing outside the prefix was delivered, and no stored consumer
//     position lies past what was delivered.
func TestSubscribeDeliversEverythingAcked(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	sz := subscribeShort
	if os.Getenv("ROLLOUTD_SUBSCRIBE_LONG") == "1" {
		sz = subscribeLong
	}
	seeds(t, 1, func(t *testing.T, seed int64) { subscribeRun(t, seed, sz) })
}

// delivery is one record as a member's subscription delivered it.
type delivery struct {
	member, inc int // member index, and its incarnation (0, then 1 after the kill)
	shard       string
	rec         *rolloutv1.Record
}

// subMember is one member of the consumer: its deliveries, kept in order,
// and the positions of its last successful commit per incarnation.
type subMember struct {
	idx int
	c   *client.Client

	mu        sync.Mutex
	got       []delivery
	deleted   map[string]int            // shard → Deleted batches seen
	committed map[int]map[string]uint64 // incarnation → positions of its last successful commit
	commits   int
	// resubscribes counts the subscriptions that gave up on an
	// unreachable instance and were started again.
	resubscribes int
	errs         []error
}

func (m *subMember) record(inc int, b *client.SubscribeBatch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range b.Records {
		m.got = append(m.got, delivery{member: m.idx, inc: inc, shard: b.Shard, rec: r})
	}
	if b.Deleted {
		m.deleted[b.Shard]++
	}
}

func (m *subMember) snapshot() ([]delivery, map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.got), maps.Clone(m.deleted)
}

// run consumes one incarnation until ctx ends: it records every batch,
// and commits every second. Ending ctx is the kill: no commit follows.
// When the subscription gives up on an unreachable instance (its retry
// budget is a few seconds; a restart on a saturated Azurite can take
// longer), it subscribes again from the cursors it received, as a
// trainer would.
func (m *subMember) run(ctx context.Context, inc int) {
	var positions map[string]uint64 // nil: the consumer's stored positions
	for ctx.Err() == nil {
		sub, err := m.c.Subscribe(ctx, subPrefix, client.SubscribeOptions{Consumer: subConsumer, Member: m.idx, Members: subMembers, Positions: positions})
		if err == nil {
			positions, err = m.consume(ctx, inc, sub)
		}
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, client.ErrUnavailable):
			m.mu.Lock()
			m.resubscribes++
			m.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		default:
			m.fail(fmt.Errorf("member %d.%d: subscription ended: %w", m.idx, inc, err))
			return
		}
	}
}

// consume reads sub until it ends, and returns the cursors it yielded.
func (m *subMember) consume(ctx context.Context, inc int, sub *client.Subscription) (map[string]uint64, error) {
	defer sub.Close()
	last := time.Now()
	for b, err := range sub.Batches() {
		if err != nil {
			return sub.Positions(), err
		}
		m.record(inc, b)
		if ctx.Err() != nil {
			break
		}
		if time.Since(last) < time.Second {
			continue
		}
		last = time.Now()
		if err := sub.Commit(ctx); err != nil {
			continue // the next second's commit carries it; a position never moves back
		}
		m.mu.Lock()
		m.committed[inc] = maps.Clone(sub.Positions())
		m.commits++
		m.mu.Unlock()
	}
	return sub.Positions(), ctx.Err()
}

func (m *subMember) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs = append(m.errs, err)
}

// memberRunner runs a member's incarnations one after the other.
type memberRunner struct {
	m      *subMember
	inc    int
	cancel context.CancelFunc
	done   chan struct{}
}

func startMember(m *subMember, inc int) *memberRunner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &memberRunner{m: m, inc: inc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		m.run(ctx, inc)
	}()
	return r
}

func (r *memberRunner) stop() {
	r.cancel()
	<-r.done
}

func subscribeRun(t *testing.T, seed int64, sz subscribeSizes) {
	rng := newRand(seed, 33)
	container := containerName("subscribe", seed)
	hint := fmt.Sprintf("reproduce the schedule with ROLLOUTD_SIM_SEED=%d", seed)
	var v violations

	// Three instances on one container, started side by side.
	procs := make([]*proc, 3)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() { procs[i] = startProc(t, fmt.Sprintf("rolloutd#%d", i), container) })
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	r := manual.NewBuilderWithScheme("subscribetest")
	var st resolver.State
	for _, p := range procs {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: p.GRPCAddr}}})
	}
	r.InitialState(st)
	writers, err := client.New(r.Scheme()+":///rolloutd", client.WithAffinity(true), client.WithDialOptions(grpc.WithResolvers(r)))
	if err != nil {
		t.Fatal(err)
	}
	defer writers.Close()

	// Shards: sz.shards at the start, one more every sz.newEvery, one of
	// them deleted mid-run; one shard outside the prefix ("subx" shares
	// its first three letters) that must never be delivered.
	var shardsMu sync.RWMutex
	shards := make([]string, sz.shards)
	for i := range shards {
		shards[i] = fmt.Sprintf("%s/a-%03d", subPrefix, i)
	}
	outside := "subx/o"
	victim := shards[3]
	var victimMu sync.RWMutex // appends to the victim hold it to read; the delete to write
	pickShard := func() string {
		if rng.intN(50) == 0 {
			return outside
		}
		shardsMu.RLock()
		defer shardsMu.RUnlock()
		return shards[rng.intN(len(shards))]
	}

	l := newLedger()
	var failures codeCounts
	var unknown, appends atomic.Int64
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range sz.appenders {
		clients.Go(func() {
			for b := 0; ; b++ {
				select {
				case <-stop:
					return
				default:
				}
				sh := pickShard()
				recs := make([]*rolloutv1.Record, 1+rng.intN(3))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-b%d-r%d", c, b, j), rng.intN(300))
				}
				l.sent(sh, recs)
				if sh == victim {
					victimMu.RLock()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				res, err := writers.Append(ctx, sh, recs)
				cancel()
				if sh == victim {
					victimMu.RUnlock()
				}
				if err != nil {
					// It may have landed: the ledger keeps it as sent,
					// and storage says whether it did.
					failures.add(err)
					unknown.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				appends.Add(1)
				v.addErr(l.acked(sh, res))
			}
		})
	}

	// The members: member i talks to instance i, so that the instance
	// killed below (0) serves a live subscription.
	members := make([]*subMember, subMembers)
	runners := make([]*memberRunner, subMembers)
	for i := range members {
		c, err := client.New(procs[i].GRPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		members[i] = &subMember{idx: i, c: c, deleted: map[string]int{}, committed: map[int]map[string]uint64{}}
		runners[i] = startMember(members[i], 0)
	}

	// The schedule, as fractions of the run.
	start := time.Now()
	at := func(frac float64) {
		time.Sleep(time.Until(start.Add(time.Duration(frac * float64(sz.run)))))
	}
	grow := make(chan struct{})
	go func() {
		defer close(grow)
		tick := time.NewTicker(sz.newEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			shardsMu.Lock()
			shards = append(shards, fmt.Sprintf("%s/new/n-%03d", subPrefix, n))
			shardsMu.Unlock()
		}
	}()

	at(0.3)
	// The victim is deleted once a member has delivered some of it: its
	// subscription has read the incarnation the delete ends, so it must
	// say the shard was deleted.
	for seen := time.Now(); time.Since(seen) < 20*time.Second && !deliveredAny(members, victim); {
		time.Sleep(20 * time.Millisecond)
	}
	victimMu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	del, err := writers.DeleteShard(ctx, victim, nil)
	cancel()
	if err != nil {
		v.add("DeleteShard %s: %v", victim, err)
	} else {
		l.acks.DeletedThrough(victim, del.GetLastSeq())
		t.Logf("deleted %s through seq %d (%d records)", victim, del.GetLastSeq(), del.GetRecords())
	}
	// Appends to the victim wait until its deletion was reported (or
	// sz.reported passed), then re-create it. (A re-creation right after the delete
	// goes unreported: the readers see only the new incarnation.)
	for seen := time.Now(); time.Since(seen) < sz.reported && !deletedSeen(members, victim); {
		time.Sleep(20 * time.Millisecond)
	}
	victimMu.Unlock()

	at(0.4)
	killedPositions := func() map[string]uint64 {
		runners[1].stop() // the kill: no commit after the last one
		members[1].mu.Lock()
		defer members[1].mu.Unlock()
		return maps.Clone(members[1].committed[0])
	}()
	t.Logf("member 1 killed after %d commits; its last commit held %d positions", members[1].commits, len(killedPositions))
	time.Sleep(rng.between(200*time.Millisecond, time.Second))
	runners[1] = startMember(members[1], 1)

	at(0.6)
	addr := procs[0].GRPCAddr
	code, _ := procs[0].Signal(syscall.SIGKILL, 5*time.Second)
	_, acked := l.counts()
	t.Logf("kill -9 %s after %d acked records (exit code %d)", procs[0].Name, acked, code)
	time.Sleep(rng.between(500*time.Millisecond, 1500*time.Millisecond))
	procs[0] = restartProc(t, "rolloutd#0'", container, addr)

	at(1)
	close(stop)
	clients.Wait()
	<-grow

	// What storage holds: every acked record (the ledger checks it), and
	// every outcome-unknown one that landed.
	direct := directStore(t, container)
	defer direct.Close()
	rep, errs := l.checkStore(context.Background(), direct)
	for _, err := range errs {
		v.addErr(err)
	}
	stored := map[string][]uint64{} // shard under the prefix → stored seqs, increasing
	for sh, seqs := range rep.seqs {
		if sh != outside {
			stored[sh] = seqs
		}
	}

	// Wait until every stored record was delivered, then stop the members.
	delivered := func() map[string]map[uint64]bool {
		out := map[string]map[uint64]bool{}
		for _, m := range members {
			got, _ := m.snapshot()
			for _, d := range got {
				if out[d.shard] == nil {
					out[d.shard] = map[uint64]bool{}
				}
				out[d.shard][d.rec.GetSeq()] = true
			}
		}
		return out
	}
	missing := func() int {
		got, n := delivered(), 0
		for sh, seqs := range stored {
			for _, s := range seqs {
				if !got[sh][s] {
					n++
				}
			}
		}
		return n
	}
	drainStart := time.Now()
	for missing() > 0 && time.Since(drainStart) < sz.drain {
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("drained %v after the appends stopped", time.Since(drainStart).Round(time.Millisecond))
	// A last look at the consumer's positions before the members stop.
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	info, err := procs[1].Client.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: subPrefix, Consumer: subConsumer, IncludePositions: true})
	cancel()
	for _, rn := range runners {
		rn.stop()
	}
	for _, m := range members {
		for _, err := range m.errs {
			v.addErr(err)
		}
	}

	deliveries, dups, windowSize := checkDeliveries(&v, l, members, stored, victim, del.GetLastSeq(), outside, killedPositions)
	if err != nil {
		v.add("DescribeConsumer: %v", err)
	} else {
		got := delivered()
		for sh, pos := range info.GetPositions() {
			if pos > 0 && !got[sh][pos] && !(sh == victim && pos <= del.GetLastSeq()) {
				v.add("consumer position %s=%d: no record at that seq was delivered", sh, pos)
			}
		}
	}
	sent, ackedN := l.counts()
	t.Logf("%d shards under %q (%d created during the run, 1 deleted), %d appenders: %d appends acked, %d failed (%v); %d records sent, %d acked, %d stored; %d deliveries (%d of them again, in the killed member's uncommitted window of %d); member commits %d and %d, resubscriptions %d and %d",
		len(stored), subPrefix, len(stored)-sz.shards, sz.appenders, appends.Load(), unknown.Load(), &failures, sent, ackedN, rep.stored, deliveries, dups, windowSize, members[0].commits, members[1].commits, members[0].resubscribes, members[1].resubscribes)
	if ackedN == 0 || rep.stored == 0 {
		v.add("nothing was acked or stored: the load did not run")
	}
	v.report(t, hint)
}

// restartProc starts the rolloutd binary again on addr, as a supervisor
// would: when it fails at startup (on a saturated Azurite, creating the
// container can outlast its deadline) it tries again, five times.
func restartProc(t *testing.T, name, container, addr string) *proc {
	t.Helper()
	opts := rolloutdproc.Options{
		Name: name,
		Args: []string{"--store", "azblob://" + container, "--listen", addr},
		Env:  []string{"AZURE_STORAGE_CONNECTION_STRING=" + sharedAzurite(t).ConnectionString},
	}
	var errs []error
	for range 5 {
		p, err := rolloutdproc.Launch(rolloutdBinary(t), opts)
		if err == nil {
			t.Cleanup(func() {
				if err := p.Stop(10 * time.Second); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			})
			return p
		}
		errs = append(errs, err)
		t.Logf("%s did not start, starting it again: %v", name, err)
		time.Sleep(time.Second)
	}
	t.Fatalf("%s did not start in 5 tries: %v", name, errors.Join(errs...))
	return nil
}

// deliveredAny says whether a member delivered a record of shard.
func deliveredAny(members []*subMember, shard string) bool {
	for _, m := range members {
		got, _ := m.snapshot()
		for _, d := range got {
			if d.shard == shard {
				return true
			}
		}
	}
	return false
}

// deletedSeen says whether a member was told shard was deleted.
func deletedSeen(members []*subMember, shard string) bool {
	for _, m := range members {
		if _, deleted := m.snapshot(); deleted[shard] > 0 {
			return true
		}
	}
	return false
}

// checkDeliveries checks what the members delivered against what storage
// holds (stored: shard → seqs) and what was sent, and returns how many
// deliveries there were. killed holds the positions of the last commit of
// member 1's first incarnation, the one killed: its deliveries past them
// are its uncommitted window, the only place a duplicate may come from.
// It returns how many records were delivered, how many of them again, and
// the size of that window.
func checkDeliveries(v *violations, l *ledger, members []*subMember, stored map[string][]uint64, victim string, deletedThrough uint64, outside string, killed map[string]uint64) (deliveries, duplicates, windowSize int) {
	type key struct {
		shard string
		seq   uint64
	}
	seen := map[key]delivery{}
	window := map[key]bool{}
	owner := map[string]int{} // shard → member that delivered it
	deletedBy := map[int]bool{}
	n := 0
	for _, m := range members {
		got, deleted := m.snapshot()
		for sh, k := range deleted {
			if sh != victim {
				v.add("member %d: shard %s reported deleted %d times; it never was", m.idx, sh, k)
			} else {
				deletedBy[m.idx] = true
			}
		}
		last := map[[2]any]uint64{} // (inc, shard) → last seq delivered
		for _, d := range got {
			n++
			k := key{d.shard, d.rec.GetSeq()}
			if d.shard == outside || len(d.shard) <= len(subPrefix) || d.shard[:len(subPrefix)+1] != subPrefix+"/" {
				v.add("member %d delivered %s seq %d, outside prefix %q", m.idx, d.shard, k.seq, subPrefix)
				continue
			}
			lk := [2]any{d.inc, d.shard}
			if prev := last[lk]; k.seq <= prev {
				v.add("member %d.%d: shard %s delivered seq %d after seq %d", m.idx, d.inc, d.shard, k.seq, prev)
			}
			last[lk] = k.seq
			if o, ok := owner[d.shard]; ok && o != m.idx {
				v.add("shard %s delivered to member %d and to member %d: the shares overlap", d.shard, o, m.idx)
			}
			owner[d.shard] = m.idx
			if m.idx == 1 && d.inc == 0 && k.seq > killed[d.shard] {
				window[k] = true
			}
			if prev, dup := seen[k]; dup {
				duplicates++
				if !window[k] {
					v.add("shard %s seq %d delivered twice (member %d.%d, then %d.%d), outside the killed member's uncommitted window", d.shard, k.seq, prev.member, prev.inc, m.idx, d.inc)
				}
				if !proto.Equal(prev.rec, d.rec) {
					v.add("shard %s seq %d delivered twice with different records: %s, %s", d.shard, k.seq, brief(prev.rec), brief(d.rec))
				}
				continue
			}
			seen[k] = d
			want := l.sentRecord(d.shard, d.rec.GetId())
			if want == nil {
				v.add("shard %s seq %d: delivered %q, which no client sent", d.shard, k.seq, d.rec.GetId())
				continue
			}
			want = proto.CloneOf(want)
			want.Seq = k.seq
			if !proto.Equal(want, d.rec) {
				v.add("shard %s seq %d: delivered %s, sent %s (%v differ)", d.shard, k.seq, brief(d.rec), brief(want), differing(d.rec, want))
			}
		}
	}
	// Delivered ⊇ stored, and no seq delivered that storage does not hold
	// (but the deleted incarnation's, which storage no longer has).
	for sh, seqs := range stored {
		miss := 0
		for _, s := range seqs {
			if _, ok := seen[key{sh, s}]; !ok {
				if miss < 5 {
					v.add("shard %s: stored seq %d was never delivered", sh, s)
				}
				miss++
			}
		}
		if miss >= 5 {
			v.add("shard %s: %d stored records never delivered in all", sh, miss)
		}
	}
	for k := range seen {
		if _, ok := slices.BinarySearch(stored[k.shard], k.seq); !ok && k.shard != victim {
			v.add("shard %s: delivered seq %d, which storage does not hold", k.shard, k.seq)
		}
	}
	if len(deletedBy) == 0 {
		var before, after []uint64
		for k := range seen {
			switch {
			case k.shard != victim:
			case k.seq <= deletedThrough:
				before = append(before, k.seq)
			default:
				after = append(after, k.seq)
			}
		}
		slices.Sort(before)
		slices.Sort(after)
		v.add("the deleted shard %s was never reported deleted (deleted through seq %d; delivered seqs %v of the deleted incarnation, %v of the next)",
			victim, deletedThrough, before, after)
	}
	shares := [subMembers]int{}
	for _, o := range owner {
		shares[o]++
	}
	if shares[0] == 0 || shares[1] == 0 {
		v.add("the members' shares %v: one member got no shard", shares)
	}
	return n, duplicates, len(window)
}
