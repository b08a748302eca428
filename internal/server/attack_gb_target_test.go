package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"

	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

const (
	attackerID  = "spiffe://cluster.local/ns/team-a/sa/attacker"
	bystanderID = "spiffe://cluster.local/ns/team-b/sa/bystander"
)

// Both identities may do everything the attacks do, so that what slows the
// bystander is the attacker's load, not a refusal.
const attackPolicy = `grants:
  - identities: ["` + attackerID + `", "` + bystanderID + `"]
    shardPrefixes: ["*"]
    verbs: [append, get, scan]
`

// attackTarget is one rolloutd process in its own 2 GiB memory cgroup,
// with the Deployment's GOMEMLIMIT, in plaintext or under mTLS.
type attackTarget struct {
	addr, metrics string
	pid           int
	cg            *memoryCgroup
	exited        chan error
	mtls          bool
	// Nil in plaintext.
	attackerTLS                   *tls.Config
	attackerCreds, bystanderCreds credentials.TransportCredentials
}

func startAttackTarget(t *testing.T, bin string, mtls bool) *attackTarget {
	t.Helper()
	dir := t.TempDir()
	tg := &attackTarget{cg: newMemoryCgroup(t, attackLimit), addr: freeAddr(t), metrics: freeAddr(t), mtls: mtls, exited: make(chan error, 1)}
	args := " --listen=" + tg.addr + " --metrics-listen=" + tg.metrics + " --store=" + filepath.Join(dir, "data") +
		" --log-level=warn --send-timeout=" + attackSendTimeout.String()
	if mtls {
		serverCA, clientCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA")
		certFile, keyFile := serverCA.Server(t, "rolloutd").Write(t, dir)
		caFile, policyFile := filepath.Join(dir, "client-ca.pem"), filepath.Join(dir, "policy.yaml")
		testpki.WriteFile(t, caFile, clientCA.PEM)
		testpki.WriteFile(t, policyFile, []byte(attackPolicy))
		args += " --tls-cert=" + certFile + " --tls-key=" + keyFile + " --tls-client-ca=" + caFile + " --authz-file=" + policyFile
		cfg := func(id string) *tls.Config {
			return &tls.Config{RootCAs: serverCA.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{clientCA.ClientURI(t, id).TLS(t)}}
		}
		tg.attackerTLS = cfg(attackerID)
		tg.attackerCreds, tg.bystanderCreds = credentials.NewTLS(cfg(attackerID)), credentials.NewTLS(cfg(bystanderID))
	}
	cmd := exec.Command("sh", "-c", "echo $$ > "+tg.cg.procs+" && exec "+bin+args)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=1800MiB")
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { tg.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-tg.exited
	})
	waitServing(t, tg.addr)
	tg.pid = cmd.Process.Pid
	return tg
}

// rss is the process's VmRSS and VmHWM, in kB.
func (tg *attackTarget) rss() (now, peak int64) {
	return procStatusKB(nil, tg.pid, "VmRSS"), procStatusKB(nil, tg.pid, "VmHWM")
}

func (tg *attackTarget) checkAlive(t *testing.T) {
	t.Helper()
	select {
	case err := <-tg.exited:
		tg.exited <- err
		t.Fatalf("rolloutd exited during the attacks: %v (OOM kills: %d)", err, tg.cg.oomKills())
	default:
	}
}

// followAttackGB is attack 4: 2,000 follow Scans on one shard from one
// address (8 connections, as --max-concurrent-streams is 256), while the
// attacker appends to that shard about 1.1 times a second; it reports RSS,
// goroutines and the process's store ops per append, against one follower
// in the same process first (the bystander's own store ops are in both).
func followAttackGB(t *testing.T, tg *attackTarget) {
	const conns, perConn = 8, 250
	w := dial(t, tg.addr, tg.attackerCreds)
	tail := appendForFollowers(t, w, "follow", 0)
	one := startFollowers(t, dial(t, tg.addr, tg.attackerCreds), "follow", tail, 1)
	tail, base := followWindow(t, tg, w, tail, []*followers{one})
	one.stop()
	t.Logf("follow: 1 follower: %s", base)

	start := time.Now()
	var all []*followers
	for range conns {
		all = append(all, startFollowers(t, dial(t, tg.addr, tg.attackerCreds), "follow", tail, perConn))
	}
	tail = appendForFollowers(t, w, "follow", int(tail))
	for _, fs := range all {
		fs.waitFor(t, tail)
	}
	retries := 0
	for _, fs := range all {
		fs.mu.Lock()
		retries += fs.retries
		fs.mu.Unlock()
	}
	t.Logf("follow: %d follow Scans on %d connections at the tail after %s (%d refused BACKPRESSURE while opening, and opened again); goroutines %.0f",
		conns*perConn, conns, time.Since(start).Round(100*time.Millisecond), retries, scrape(t, tg.metrics, "go_goroutines"))
	_, many := followWindow(t, tg, w, tail, all)
	t.Logf("follow: %d followers: %s", conns*perConn, many)

	stopped := time.Now()
	var wg sync.WaitGroup
	for _, fs := range all {
		wg.Go(fs.stop)
	}
	wg.Wait()
	idle := 0.0
	for deadline := time.Now().Add(attackSendTimeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if idle = scrape(t, tg.metrics, "go_goroutines"); idle < 200 {
			break
		}
	}
	now, _ := tg.rss()
	t.Logf("follow: streams cancelled; %.0f goroutines %s later, RSS %d MiB", idle, time.Since(stopped).Round(100*time.Millisecond), now>>10)
	if idle >= 200 {
		t.Errorf("follow: %.0f goroutines %s after the followers left", idle, attackSendTimeout)
	}
}

// followWindow appends to the followed shard 1.1 times a second for 45 s
// and says what the process did meanwhile.
func followWindow(t *testing.T, tg *attackTarget, w rolloutv1.RolloutServiceClient, tail uint64, all []*followers) (uint64, string) {
	ops := func() float64 { return scrapeSum(t, tg.metrics, "rolloutd_blob_operations_total") }
	before, began := ops(), time.Now()
	appends, maxGoroutines := 0, 0.0
	tick := time.NewTicker(time.Second * 10 / 11)
	defer tick.Stop()
	for time.Since(began) < 45*time.Second {
		<-tick.C
		tail = appendForFollowers(t, w, "follow", int(tail))
		appends++
		maxGoroutines = max(maxGoroutines, scrape(t, tg.metrics, "go_goroutines"))
	}
	for _, fs := range all {
		fs.waitFor(t, tail)
	}
	n := ops() - before
	now, peak := tg.rss()
	return tail, fmt.Sprintf("%d appends in %s: %.0f store ops in the process, %.1f per append; RSS %d MiB (peak so far %d MiB, heap in use %.0f MiB); goroutines at most %.0f; budget in use %.0f MiB",
		appends, time.Since(began).Round(time.Second), n, n/float64(appends), now>>10, peak>>10,
		scrape(t, tg.metrics, "go_memstats_heap_inuse_bytes")/(1<<20), maxGoroutines,
		scrape(t, tg.metrics, "rolloutd_request_budget_in_use_bytes")/(1<<20))
}

// scrapeSum sums a metric's samples over all its labels.
func scrapeSum(t *testing.T, addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Errorf("scrape: %v", err)
		return -1
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(nil, 1<<20)
	sum := 0.0
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		if f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += f
		}
	}
	return sum
}
