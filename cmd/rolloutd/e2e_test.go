package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/testutil/ledger"
)

// The real binary on Azurite: it serves Append and Get over gRPC, reports
// metrics, and exits 0 on SIGTERM.
func TestBinaryOnAzurite(t *testing.T) {
	env, store := azureEnv(t)
	p := start(t, env, "--store", store)
	ctx := context.Background()

	resp, err := p.Client.Append(ctx, &rolloutv1.AppendRequest{Shard: "exp1/run1", Records: []*rolloutv1.Record{ledger.Record("a"), {Content: "server assigns my id"}}})
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.GetResults()
	if len(rs) != 2 || rs[0].GetSeq() != 1 || rs[1].GetSeq() != 2 || rs[1].GetId() == "" {
		t.Fatalf("results: %v", rs)
	}
	got, err := p.Client.Get(ctx, &rolloutv1.GetRequest{Shard: "exp1/run1", Id: rs[1].GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetRecord().GetContent() != "server assigns my id" || got.GetRecord().GetSeq() != 2 {
		t.Errorf("Get: %v", got.GetRecord())
	}

	if n := p.Metric("rolloutd_records_appended_total", ""); n != 2 {
		t.Errorf("rolloutd_records_appended_total %v, want 2", n)
	}
	// Commit protocol v2: the shard's creation and the commit are
	// create-only puts (the manifest CAS, a checkpoint, follows later).
	if n := p.Metric("rolloutd_blob_operations_total", `op="put_create",outcome="ok"`); n < 2 {
		t.Errorf("successful create-only puts counted: %v, want the claim's and the commit's", n)
	}
	if n := p.Metric("rolloutd_rpc_duration_seconds_count", `method="Get"`); n != 1 {
		t.Errorf("Get latency samples %v, want 1", n)
	}
	// Every HTTP try to Azure is counted, beside the operations.
	if n := p.Metric("rolloutd_blob_tries_total", `status="2xx"`); n < 2 {
		t.Errorf("rolloutd_blob_tries_total{status=\"2xx\"} %v, want at least the two create-only puts", n)
	}

	if code, took := p.Signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM (%v)", code, took)
	}
	for _, line := range []string{"shutdown: health NOT_SERVING", "shutdown: writers closed", "rolloutd stopped", `"shard":"exp1/run1","epoch":1`} {
		if !strings.Contains(p.Output(), line) {
			t.Errorf("log lacks %q", line)
		}
	}
}

// Two instances on one Azurite container: an append acked by A is visible
// to Get on B at once, and appends alternating between A and B on one shard
// all succeed, each taking the shard back from the other, with nothing lost
// or duplicated.
func TestBinaryTwoInstances(t *testing.T) {
	env, store := azureEnv(t)
	a := start(t, env, "--store", store)
	b := start(t, env, "--store", store)
	ctx := context.Background()

	for i := range 10 {
		id := fmt.Sprintf("ryw-%d", i)
		r, err := appendOne(ctx, a.Client, "ryw", id)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.Client.Get(ctx, &rolloutv1.GetRequest{Shard: "ryw", Id: id})
		if err != nil {
			t.Fatalf("Get on B of %s acked by A: %v", id, err)
		}
		if got.GetRecord().GetSeq() != r.GetSeq() {
			t.Fatalf("B read seq %d, A acked %d", got.GetRecord().GetSeq(), r.GetSeq())
		}
	}

	const n = 40
	acked := map[string]uint64{}
	for i := range n {
		c := []*proc{a, b}[i%2]
		id := fmt.Sprintf("alt-%d", i)
		r, err := appendOne(ctx, c.Client, "alt", id)
		if err != nil {
			t.Fatalf("append %d on %s: %v", i, c.GRPCAddr, err)
		}
		acked[id] = r.GetSeq()
	}
	// Every ack reads back, from both instances, with its seq; the shard
	// holds exactly the acked records.
	for id, seq := range acked {
		for _, p := range []*proc{a, b} {
			got, err := p.Client.Get(ctx, &rolloutv1.GetRequest{Shard: "alt", Id: id})
			if err != nil || got.GetRecord().GetSeq() != seq {
				t.Errorf("Get %s on %s: %v %v, acked seq %d", id, p.GRPCAddr, got.GetRecord(), err, seq)
			}
		}
	}
	m, err := shard.NewReader(readStore(t, store), shard.ReaderOptions{}).Manifest(ctx, "alt")
	if err != nil {
		t.Fatal(err)
	}
	if m.GetRecordCount() != n || m.GetNextSeq() != n+1 {
		t.Errorf("shard holds %d records (next seq %d), %d were acked", m.GetRecordCount(), m.GetNextSeq(), n)
	}
	fences := a.Metric("rolloutd_writer_fences_total", "") + b.Metric("rolloutd_writer_fences_total", "")
	heals := a.Metric("rolloutd_append_self_heals_total", "") + b.Metric("rolloutd_append_self_heals_total", "")
	opens := a.Metric("rolloutd_writer_opens_total", "") + b.Metric("rolloutd_writer_opens_total", "")
	t.Logf("%d alternating appends on two instances: all acked, %d records stored, epoch %d; %v fences, %v self-heals, %v writer opens",
		n, m.GetRecordCount(), m.GetEpoch(), fences, heals, opens)
	if fences != n-2 || heals != n-2 {
		t.Errorf("%v fences and %v self-heals, want %d each: every append after each instance's first takes the shard back", fences, heals, n-2)
	}
}

// SIGTERM during a stream of appends: the process exits 0 within its
// shutdown timeout, and every acked record is readable after a restart.
func TestBinarySIGTERMDuringAppends(t *testing.T) {
	env, store := azureEnv(t)
	const timeout = 5 * time.Second
	p := start(t, env, "--store", store, "--shutdown-timeout", timeout.String(), "--drain-delay", "300ms")

	type ack struct {
		shard string
		seq   uint64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				shardName := fmt.Sprintf("term/s%d", g%3)
				id := fmt.Sprintf("g%d-%d", g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := appendOne(ctx, p.Client, shardName, id)
				cancel()
				if err != nil {
					continue // refused or cut off by the shutdown: not acked
				}
				mu.Lock()
				acked[id] = ack{shardName, r.GetSeq()}
				mu.Unlock()
			}
		})
	}
	time.Sleep(time.Second)
	code, took := p.Signal(syscall.SIGTERM, timeout)
	close(stop)
	wg.Wait()
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
	if took > timeout {
		t.Errorf("exited %v after SIGTERM, over the %v shutdown timeout", took, timeout)
	}
	if len(acked) == 0 {
		t.Fatal("no append was acked before the shutdown")
	}

	q := start(t, env, "--store", store)
	ctx := context.Background()
	perShard := map[string]int{}
	for id, a := range acked {
		perShard[a.shard]++
		got, err := q.Client.Get(ctx, &rolloutv1.GetRequest{Shard: a.shard, Id: id})
		if err != nil || got.GetRecord().GetSeq() != a.seq {
			t.Errorf("after restart, acked %s/%s: %v %v, acked seq %d", a.shard, id, got.GetRecord(), err, a.seq)
		}
	}
	r := shard.NewReader(readStore(t, store), shard.ReaderOptions{})
	stored := 0
	for s, n := range perShard {
		m, err := r.Manifest(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		// Appends cut off by the shutdown after they were sent may have
		// landed without an ack; none acked may be missing.
		if int(m.GetRecordCount()) < n {
			t.Errorf("shard %s holds %d records, %d were acked", s, m.GetRecordCount(), n)
		}
		stored += int(m.GetRecordCount())
	}
	t.Logf("SIGTERM after 1s of appends: exit %d in %v; %d acked, %d stored, all acked readable after restart", code, took, len(acked), stored)
}

// A bad flag or environment value fails at startup, naming the flag.
func TestBinaryBadConfig(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--max-writers", "0"}, nil, "--max-writers"},
		{nil, []string{"ROLLOUTD_SHUTDOWN_TIMEOUT=soon"}, "--shutdown-timeout (from ROLLOUTD_SHUTDOWN_TIMEOUT)"},
		{[]string{"--store", "azblob://rollouts"}, []string{"AZURE_STORAGE_CONNECTION_STRING=", "AZURE_STORAGE_ACCOUNT_URL="}, "needs credentials"},
	} {
		cmd := exec.Command(binary, tt.args...)
		cmd.Env = append(cmd.Environ(), tt.env...)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), tt.want) {
			t.Errorf("%v %v: exit %v, output %q; want exit 1 naming %q", tt.args, tt.env, err, out, tt.want)
		}
	}
}

// The default backend, a local directory: acked appends survive a restart,
// and a second process on the same directory is refused at startup. No
// profiles are served by default.
func TestBinaryLocalStore(t *testing.T) {
	dir := t.TempDir()
	p := start(t, nil, "--store", dir)
	// A new store is what a mistyped --store serves too: its start says so.
	if want := `"msg":"store is new or empty: it holds no shards; if you expected data, check --store","store":"file://` + dir + `"`; !strings.Contains(p.Output(), want) {
		t.Errorf("the start of a new store does not log %s:\n%s", want, p.Output())
	}
	ctx := context.Background()
	r, err := appendOne(ctx, p.Client, "local", "a")
	if err != nil {
		t.Fatal(err)
	}
	m := metricsText(t, p.MetricsAddr)
	if !strings.Contains(m, "\nrolloutd_store_failed 0\n") {
		t.Errorf("/metrics has no rolloutd_store_failed 0:\n%s", m)
	}
	// The Azure tries are exported at 0, for the alert and the dashboard.
	if !strings.Contains(m, "\nrolloutd_blob_tries_total{status=\"503\"} 0\n") {
		t.Errorf("/metrics has no rolloutd_blob_tries_total{status=\"503\"} 0:\n%s", m)
	}
	// The append's puts were made durable in groups, and counted.
	for _, name := range []string{"rolloutd_localstore_sync_group_size", "rolloutd_localstore_sync_group_seconds"} {
		if g := regexp.MustCompile("\n" + name + `_count (\d+)\n`).FindStringSubmatch(m); g == nil || g[1] == "0" {
			t.Errorf("/metrics: %s counts no group (%v):\n%s", name, g, m)
		}
	}
	// Profiles are off unless --pprof asks for them.
	resp, err := http.Get("http://" + p.MetricsAddr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %s, want 404", resp.Status)
	}

	second := exec.Command(binary, "--store", dir, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	out, _ := second.CombinedOutput()
	if second.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "--store") {
		t.Errorf("second process on %s: exit %d, %q; want exit 1 naming --store", dir, second.ProcessState.ExitCode(), out)
	}

	if code, _ := p.Signal(syscall.SIGINT, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGINT", code)
	}
	q := start(t, nil, "--store", "file://"+dir)
	got, err := q.Client.Get(ctx, &rolloutv1.GetRequest{Shard: "local", Id: "a"})
	if err != nil || got.GetRecord().GetSeq() != r.GetSeq() {
		t.Errorf("after restart: %v %v", got, err)
	}
	if strings.Contains(q.Output(), "store is new or empty") {
		t.Errorf("a store with a shard logged that it is empty:\n%s", q.Output())
	}
}
