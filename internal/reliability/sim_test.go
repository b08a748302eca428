package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
)

// lockedRand is a seeded generator shared by goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRand(seed int64, stream uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(uint64(seed), stream))}
}

func (r *lockedRand) intN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.IntN(n)
}

// between returns a duration in [lo, hi).
func (r *lockedRand) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.intN(int(hi-lo)))
}

// addFaults makes every kind of store call fail, stall, hang or lose its
// response now and then. scale multiplies the probabilities.
func addFaults(fs *faultstore.Store, scale float64) {
	for _, op := range faultstore.Ops {
		ops := []faultstore.Op{op}
		fs.Add(faultstore.Rule{Ops: ops, Fault: faultstore.Delay, Prob: 0.3, Delay: 300 * time.Microsecond})
		fs.Add(faultstore.Rule{Ops: ops, Fault: faultstore.Delay, Prob: 0.02 * scale, Delay: 20 * time.Millisecond})
		fs.Add(faultstore.Rule{Ops: ops, Fault: faultstore.Fail, Prob: 0.03 * scale})
		fs.Add(faultstore.Rule{Ops: ops, Fault: faultstore.LoseResponse, Prob: 0.03 * scale})
		fs.Add(faultstore.Rule{Ops: ops, Fault: faultstore.Hang, Prob: 0.002 * scale})
	}
}

// simWriterOptions make merges, GC and orphan scans run all the time on
// small shards, and keep retries fast.
func simWriterOptions() shard.Options {
	return shard.Options{
		RetryBackoff:        time.Millisecond,
		CommitTimeout:       time.Second,
		MaxQueuedBytes:      64 << 10,
		MergeRun:            3,
		MergeMaxGenerations: 6,
		MergeTierBytes:      4 << 10,
		MergeAge:            200 * time.Millisecond,
		MergeInterval:       5 * time.Millisecond,
		RetireGrace:         30 * time.Millisecond,
		OrphanScanInterval:  100 * time.Millisecond,
	}
}

// simServerConfig is one instance of the simulation: a writer LRU of two,
// so that most appends evict a writer.
func simServerConfig(store blob.Store) server.Config {
	return server.Config{
		Store:           store,
		MaxWriters:      2,
		Writer:          simWriterOptions(),
		OpenTimeout:     2 * time.Second,
		RetryBackoff:    2 * time.Millisecond,
		DefaultDeadline: 5 * time.Second,
	}
}

// pool holds the instances clients talk to; chaos replaces them.
type pool struct {
	mu  sync.Mutex
	ins []*instance
	all []*instance // every instance ever started, for metrics
}

func newPool(ins ...*instance) *pool {
	return &pool{ins: ins, all: append([]*instance(nil), ins...)}
}

// metric sums a metric over every instance the pool ever had.
func (p *pool) metric(name string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum float64
	for _, in := range p.all {
		sum += in.metric(name)
	}
	return sum
}

func (p *pool) get(i int) *instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ins[i]
}

func (p *pool) swap(i int, in *instance) *instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.ins[i]
	p.ins[i] = in
	p.all = append(p.all, in)
	return old
}

// TestSimulatedFaults runs concurrent appenders and readers through two
// in-process rolloutd instances that share one store, over a fault injector
// that fails, delays, hangs and loses the responses of every kind of store
// call. The writer LRU holds two writers for twelve shards, merges and GC
// run constantly, and a chaos loop crashes and restarts instances and
// claims shards from outside (forced fences). Clients retry failed appends
// with the same ids. After each run it checks that every acked record is
// stored exactly once with identical content, that seqs are unique and
// increasing, that every epoch had one writer and no record ever left the
// live set, and that no goroutine leaked.
func TestSimulatedFaults(t *testing.T) {
	rounds := 2
	if testing.Short() {
		rounds = 1
	}
	seeds(t, rounds, func(t *testing.T, seed int64) {
		simulate(t, seed, simSize{shards: 12, appenders: 10, batches: 40, readers: 3, faults: 2})
	})
}

type simSize struct {
	shards, appenders, batches, readers int
	faults                              float64 // scales the fault probabilities
}

func simulate(t *testing.T, seed int64, size simSize) {
	leaks := goleak.IgnoreCurrent()
	hint := fmt.Sprintf("reproduce with ROLLOUTD_SIM_SEED=%d", seed)
	mem := memstore.New()
	rec := newRecorder(mem)
	fs := faultstore.New(rec, seed)
	addFaults(fs, size.faults)
	rng := newRand(seed, 1)

	p := newPool(startInstance(t, "a0", simServerConfig(fs)), startInstance(t, "b0", simServerConfig(fs)))
	l := newLedger()
	var v violations
	var failures codeCounts
	var appends, gets, getMisses, retries atomic.Int64
	shardName := func(i int) string { return fmt.Sprintf("sim/s%02d", i) }

	// Chaos: crash or restart an instance, or claim a shard from outside.
	stopChaos := make(chan struct{})
	var chaos sync.WaitGroup
	var crashes, restarts, foreignClaims atomic.Int64
	chaos.Go(func() {
		n := 0
		for {
			select {
			case <-stopChaos:
				return
			case <-time.After(rng.between(50*time.Millisecond, 250*time.Millisecond)):
			}
			n++
			switch k := rng.intN(10); {
			case k < 3: // crash: in-flight RPCs cut off, writers aborted
				i := rng.intN(2)
				old := p.swap(i, startInstance(t, fmt.Sprintf("%c%d", 'a'+i, n), simServerConfig(fs)))
				old.stop(t, 0)
				crashes.Add(1)
			case k < 4: // graceful restart: writers closed, queued appends flushed
				i := rng.intN(2)
				old := p.swap(i, startInstance(t, fmt.Sprintf("%c%d", 'a'+i, n), simServerConfig(fs)))
				old.stop(t, 2*time.Second)
				restarts.Add(1)
			default: // another writer claims a shard: whoever held it is fenced
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				w, err := shard.Open(ctx, fs, shardName(rng.intN(size.shards)), simWriterOptions())
				if err == nil {
					foreignClaims.Add(1)
					if rng.intN(2) == 0 {
						w.Abort()
					} else if err := w.Close(ctx); err != nil {
						w.Abort()
					}
				}
				cancel()
			}
		}
	})

	var readers sync.WaitGroup
	stopReaders := make(chan struct{})
	for range size.readers {
		readers.Go(func() {
			for {
				select {
				case <-stopReaders:
					return
				default:
				}
				sh, id, a, ok := l.pickAcked(rng.intN)
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				want, _, _ := l.expected(sh, id)
				in := p.get(rng.intN(2))
				ctx, cancel := context.WithTimeout(context.Background(), rng.between(100*time.Millisecond, time.Second))
				resp, err := in.client.Get(ctx, &rolloutv1.GetRequest{Shard: sh, Id: id})
				cancel()
				gets.Add(1)
				switch {
				case err == nil:
					if !proto.Equal(resp.GetRecord(), want) {
						v.add("Get %s/%s on %s: read %s, acked seq %d with %s; %v differ", sh, id, in.name, brief(resp.GetRecord()), a.seq, brief(want), differing(resp.GetRecord(), want))
					}
				case status.Code(err) == codes.NotFound:
					v.add("Get %s/%s on %s: acked record (seq %d) not found: %v", sh, id, in.name, a.seq, err)
				case !retryable(err):
					v.add("Get %s/%s on %s: %v", sh, id, in.name, err)
				default:
					getMisses.Add(1)
				}
			}
		})
	}

	var appenders sync.WaitGroup
	for c := range size.appenders {
		appenders.Go(func() {
			for b := range size.batches {
				sh := shardName(rng.intN(size.shards))
				recs := make([]*rolloutv1.Record, 1+rng.intN(4))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-b%d-r%d", c, b, j), rng.intN(3000))
				}
				l.sent(sh, recs)
				req := &rolloutv1.AppendRequest{Shard: sh, Records: recs}
				if !appendUntilAcked(p, rng, l, &v, &failures, &retries, req, 200) {
					continue
				}
				appends.Add(1)
			}
		})
	}
	appenders.Wait()
	close(stopReaders)
	readers.Wait()
	close(stopChaos)
	chaos.Wait()

	// Quiesce: no more faults; stop both instances gracefully.
	fs.Clear()
	for i := range 2 {
		p.get(i).stop(t, 5*time.Second)
	}

	ctx := context.Background()
	sRep, errs := l.checkStore(ctx, mem)
	for _, err := range errs {
		v.addErr(err)
	}
	hRep, errs := rec.check()
	for _, err := range errs {
		v.addErr(err)
	}
	checkReadable(t, mem, l, &v)

	sent, acked := l.counts()
	t.Logf("%d appends (%d records sent, %d acked) on %d shards, %d retries; %d Gets (%d failed retryably); failures by code: %v",
		appends.Load(), sent, acked, size.shards, retries.Load(), gets.Load(), getMisses.Load(), &failures)
	t.Logf("stored %d records in %d live generations; %d manifest versions, %d epoch claims; %d crashes, %d graceful restarts, %d foreign claims",
		sRep.stored, sRep.generations, hRep.versions, hRep.claims, crashes.Load(), restarts.Load(), foreignClaims.Load())
	t.Logf("writers: %v opens, %v evictions, %v fences, %v self-heals",
		p.metric("rolloutd_writer_opens_total"), p.metric("rolloutd_writer_evictions_total"),
		p.metric("rolloutd_writer_fences_total"), p.metric("rolloutd_append_self_heals_total"))
	t.Logf("injected faults: get %d, head %d, put %d, delete %d, list %d",
		fs.Injected(faultstore.OpGet), fs.Injected(faultstore.OpHead), fs.Injected(faultstore.OpPut), fs.Injected(faultstore.OpDelete), fs.Injected(faultstore.OpList))
	v.report(t, hint)
	if err := goleak.Find(leaks); err != nil {
		t.Errorf("goroutine leak: %v; %s", err, hint)
	}
}

// appendUntilAcked sends req, on an instance picked at random each time,
// until it is acknowledged, retrying retryable failures with the same ids.
// It reports false (and a violation) if a non-retryable status comes back
// or the retry budget runs out.
func appendUntilAcked(p *pool, rng *lockedRand, l *ledger, v *violations, failures *codeCounts, retries *atomic.Int64, req *rolloutv1.AppendRequest, budget int) bool {
	for range budget {
		in := p.get(rng.intN(2))
		timeout := rng.between(200*time.Millisecond, 2*time.Second)
		if rng.intN(8) == 0 {
			// Impatient: often gives up while the commit is in flight.
			timeout = rng.between(2*time.Millisecond, 30*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := in.client.Append(ctx, req)
		cancel()
		if err == nil {
			if len(resp.GetResults()) != len(req.GetRecords()) {
				v.add("Append %s: %d results for %d records", req.GetShard(), len(resp.GetResults()), len(req.GetRecords()))
				return false
			}
			for i, r := range resp.GetResults() {
				if r.GetId() != req.GetRecords()[i].GetId() {
					v.add("Append %s: result %d is for %q, record %q", req.GetShard(), i, r.GetId(), req.GetRecords()[i].GetId())
				}
			}
			v.addErr(l.acked(req.GetShard(), resp.GetResults()))
			return true
		}
		failures.add(err)
		if !retryable(err) {
			v.add("Append %s (%s) on %s: non-retryable %v", req.GetShard(), req.GetRecords()[0].GetId(), in.name, err)
			return false
		}
		retries.Add(1)
		time.Sleep(rng.between(time.Millisecond, 20*time.Millisecond))
	}
	v.add("Append %s (%s): not acked after %d tries", req.GetShard(), req.GetRecords()[0].GetId(), budget)
	return false
}

// checkReadable reads every acked record back through a fresh instance on
// the fault-free store, and compares it with what was sent.
func checkReadable(t *testing.T, store blob.Store, l *ledger, v *violations) {
	in := startInstance(t, "verify", server.Config{Store: store})
	defer in.stop(t, 5*time.Second)
	for _, k := range l.ackedIDs() {
		want, _, _ := l.expected(k[0], k[1])
		resp, err := in.client.Get(context.Background(), &rolloutv1.GetRequest{Shard: k[0], Id: k[1]})
		switch {
		case err != nil:
			v.add("after the run, Get %s/%s: %v", k[0], k[1], err)
		case !proto.Equal(resp.GetRecord(), want):
			v.add("after the run, Get %s/%s = %s, want %s; %v differ", k[0], k[1], brief(resp.GetRecord()), brief(want), differing(resp.GetRecord(), want))
		}
	}
}
