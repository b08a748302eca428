package reliability

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

// netPhase is one network fault, applied through toxiproxy for a while.
type netPhase struct {
	name   string
	toxics []string // toxiproxy toxic JSON
	down   bool     // the proxy refuses connections
}

func toxic(name, typ, stream string, toxicity float64, attrs string) string {
	return fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":%g,"attributes":%s}`, name, typ, stream, toxicity, attrs)
}

// netPhases are the faults of TestNetworkFaults, in order. Toxicity is
// decided per connection, and the SDK keeps connections alive, so partial
// toxicity hits some requests and spares others.
var netPhases = []netPhase{
	{name: "latency jitter", toxics: []string{
		toxic("lat-down", "latency", "downstream", 1, `{"latency":40,"jitter":40}`),
		toxic("lat-up", "latency", "upstream", 1, `{"latency":10,"jitter":10}`),
	}},
	{name: "connection resets", toxics: []string{
		toxic("reset", "reset_peer", "downstream", 0.5, `{"timeout":10}`),
	}},
	{name: "timeouts (stalled connections)", toxics: []string{
		toxic("stall", "timeout", "downstream", 0.2, `{"timeout":1500}`),
	}},
	{name: "bandwidth limit", toxics: []string{
		toxic("bw-down", "bandwidth", "downstream", 1, `{"rate":64}`),
		toxic("bw-up", "bandwidth", "upstream", 1, `{"rate":64}`),
	}},
	{name: "slow close", toxics: []string{
		toxic("slow-close", "slow_close", "downstream", 1, `{"delay":300}`),
		toxic("slow-close-up", "slow_close", "upstream", 1, `{"delay":300}`),
	}},
	{name: "truncated responses", toxics: []string{
		toxic("limit", "limit_data", "downstream", 0.3, `{"bytes":2048}`),
		toxic("slicer", "slicer", "downstream", 1, `{"average_size":64,"size_variation":32,"delay":200}`),
	}},
	{name: "storage unreachable", down: true},
	{name: "everything at once", toxics: []string{
		toxic("lat-down", "latency", "downstream", 1, `{"latency":20,"jitter":20}`),
		toxic("reset", "reset_peer", "downstream", 0.15, `{"timeout":50}`),
		toxic("stall", "timeout", "upstream", 0.1, `{"timeout":1000}`),
		toxic("slow-close", "slow_close", "downstream", 0.5, `{"delay":200}`),
	}},
}

// netProxy is toxiproxy, in process, in front of Azurite, on one fixed
// loopback address. Each phase gets a fresh proxy on that address with its
// toxics in place before the first connection: toxiproxy can deadlock when
// toxics are added to or removed from links that carry traffic, so a phase
// ends by stopping the proxy, which also resets every open connection.
type netProxy struct {
	api      *toxiproxy.ApiServer
	listen   string
	upstream string
	cur      *toxiproxy.Proxy
}

func startProxy(t testing.TB, upstream string) *netProxy {
	t.Helper()
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxics log through the global logger
	metrics := toxiproxy.NewMetricsContainer(prometheus.NewRegistry())
	np := &netProxy{api: toxiproxy.NewServer(metrics, zerolog.New(io.Discard)), listen: "127.0.0.1:0", upstream: upstream}
	np.phase(t, netPhase{})
	return np
}

// phase replaces the proxy with one that applies ph (or with none, when
// ph.down).
func (np *netProxy) phase(t testing.TB, ph netPhase) {
	t.Helper()
	np.stop()
	if ph.down {
		return
	}
	p := toxiproxy.NewProxy(np.api, "azurite", np.listen, np.upstream)
	for _, js := range ph.toxics {
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			t.Fatalf("toxic %s: %v", js, err)
		}
	}
	var err error
	for range 50 { // the old listener's port may take a moment to free
		if err = p.Start(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("toxiproxy on %s: %v", np.listen, err)
	}
	np.listen, np.cur = p.Listen, p
}

func (np *netProxy) stop() {
	if np.cur != nil {
		np.cur.Stop()
		np.cur = nil
	}
}

// toxiproxyLeaks ignores goroutines of stopped proxies that toxiproxy
// leaves blocked: a toxic stuck handing a chunk to a link whose writer
// exited when the proxy closed its connection. They belong to the test
// tool, not to rolloutd.
var toxiproxyLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
}

// TestNetworkFaults runs an in-process rolloutd (two instances, each with
// its own Azure client) on Azurite behind toxiproxy, and walks through
// latency jitter, connection resets, stalled connections, bandwidth limits,
// slow closes, truncated responses and an unreachable store while clients
// append and read. Every failed append must carry a retryable status, the
// clients' retries with the same ids must converge to exactly one copy of
// each record, and every acked record must read back as sent.
func TestNetworkFaults(t *testing.T) {
	az := sharedAzurite(t)
	seeds(t, 1, func(t *testing.T, seed int64) {
		networkFaults(t, az, seed, 1500*time.Millisecond)
	})
}

func networkFaults(t *testing.T, az *azurite.Instance, seed int64, phaseLen time.Duration) {
	leaks := append([]goleak.Option{goleak.IgnoreCurrent()}, toxiproxyLeaks...)
	hint := fmt.Sprintf("reproduce the client's choices with ROLLOUTD_SIM_SEED=%d (toxiproxy draws its own randomness)", seed)
	np := startProxy(t, az.Addr)
	container := fmt.Sprintf("net-%d", seed)
	newStore := func(endpoint string, tryTimeout time.Duration, retries int) *azure.Store {
		s, err := azure.New(context.Background(), azure.Config{
			Container: container,
			ConnectionString: fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://%s/%s;",
				azurite.AccountName, azurite.AccountKey, endpoint, azurite.AccountName),
			TryTimeout:    tryTimeout,
			MaxRetries:    retries,
			RetryDelay:    20 * time.Millisecond,
			MaxRetryDelay: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("azure.New: %v", err)
		}
		return s
	}
	direct := newStore(az.Addr, 10*time.Second, 3)

	cfg := func(store blob.Store) server.Config {
		wo := simWriterOptions()
		wo.CommitTimeout = 8 * time.Second
		wo.MaxQueuedBytes = 1 << 20
		wo.RetryBackoff = 10 * time.Millisecond
		wo.MergeInterval = 50 * time.Millisecond
		wo.RetireGrace = 200 * time.Millisecond
		wo.OrphanScanInterval = time.Second
		return server.Config{Store: store, MaxWriters: 4, Writer: wo, OpenTimeout: 5 * time.Second, RetryBackoff: 10 * time.Millisecond}
	}
	// Instance a gives up on storage sooner than b, so that more faults
	// reach its clients as failed appends.
	stores := []*azure.Store{newStore(np.listen, time.Second, -1), newStore(np.listen, 2*time.Second, 2)}
	p := newPool(startInstance(t, "a", cfg(stores[0])), startInstance(t, "b", cfg(stores[1])))

	rng := newRand(seed, 3)
	l := newLedger()
	var v violations
	var failures codeCounts
	var appends, retries atomic.Int64
	const shards = 6
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for c := range 6 {
		clients.Go(func() {
			for b := 0; ; b++ {
				select {
				case <-stop:
					return
				default:
				}
				sh := fmt.Sprintf("net/s%d", rng.intN(shards))
				recs := make([]*rolloutv1.Record, 1+rng.intN(3))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-b%d-r%d", c, b, j), rng.intN(4000))
				}
				l.sent(sh, recs)
				if netAppend(p, rng, l, &v, &failures, &retries, &rolloutv1.AppendRequest{Shard: sh, Records: recs}) {
					appends.Add(1)
				}
			}
		})
	}
	for range 2 {
		clients.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
				sh, id, _, ok := l.pickAcked(rng.intN)
				if !ok {
					continue
				}
				want, _, _ := l.expected(sh, id)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				resp, err := p.get(rng.intN(2)).client.Get(ctx, &rolloutv1.GetRequest{Shard: sh, Id: id})
				cancel()
				switch {
				case err == nil:
					if resp.GetRecord().GetSeq() != want.GetSeq() || resp.GetRecord().GetContent() != want.GetContent() {
						v.add("Get %s/%s: read seq %d, acked %d", sh, id, resp.GetRecord().GetSeq(), want.GetSeq())
					}
				case !retryable(err):
					v.add("Get %s/%s of an acked record: %v", sh, id, err)
				}
			}
		})
	}

	time.Sleep(phaseLen / 2)
	for _, ph := range netPhases {
		sentBefore, ackedBefore := l.counts()
		np.phase(t, ph)
		time.Sleep(phaseLen)
		np.phase(t, netPhase{})
		sent, acked := l.counts()
		t.Logf("phase %q: %d records sent, %d acked", ph.name, sent-sentBefore, acked-ackedBefore)
		time.Sleep(phaseLen / 3)
	}
	close(stop)
	clients.Wait()
	p.get(0).stop(t, 10*time.Second)
	p.get(1).stop(t, 10*time.Second)
	for _, s := range stores {
		s.Close()
	}
	np.stop()

	ctx := context.Background()
	rep, errs := l.checkStore(ctx, direct)
	for _, err := range errs {
		v.addErr(err)
	}
	checkReadable(t, direct, l, &v)
	epochs := 0
	for i := range shards {
		if m, err := shard.NewReader(direct, shard.ReaderOptions{}).Manifest(ctx, fmt.Sprintf("net/s%d", i)); err == nil {
			epochs += int(m.GetEpoch())
		}
	}
	sent, acked := l.counts()
	t.Logf("%d appends acked (%d records sent, %d acked, %d stored in %d generations), %d retries, %d epochs claimed; failures by code: %v",
		appends.Load(), sent, acked, rep.stored, rep.generations, retries.Load(), epochs, &failures)
	t.Logf("writers: %v opens, %v fences, %v self-heals", p.metric("rolloutd_writer_opens_total"),
		p.metric("rolloutd_writer_fences_total"), p.metric("rolloutd_append_self_heals_total"))
	direct.Close()
	v.report(t, hint)
	if err := goleak.Find(leaks...); err != nil {
		t.Errorf("goroutine leak: %v", err)
	}
}

// netAppend sends req until it is acknowledged, retrying retryable
// failures with the same ids; after the faults end it must converge.
func netAppend(p *pool, rng *lockedRand, l *ledger, v *violations, failures *codeCounts, retries *atomic.Int64, req *rolloutv1.AppendRequest) bool {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		in := p.get(rng.intN(2))
		ctx, cancel := context.WithTimeout(context.Background(), rng.between(time.Second, 5*time.Second))
		resp, err := in.client.Append(ctx, req)
		cancel()
		if err == nil {
			v.addErr(l.acked(req.GetShard(), resp.GetResults()))
			return true
		}
		failures.add(err)
		if !retryable(err) {
			v.add("Append %s (%s) on %s: non-retryable %v", req.GetShard(), req.GetRecords()[0].GetId(), in.name, err)
			return false
		}
		retries.Add(1)
		time.Sleep(rng.between(5*time.Millisecond, 50*time.Millisecond))
	}
	v.add("Append %s (%s): not acked within a minute of retries", req.GetShard(), req.GetRecords()[0].GetId())
	return false
}
