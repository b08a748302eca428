package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// The read attacks at full scale, against a rolloutd process run as the
// Deployment runs it (GOMEMLIMIT=1800MiB) inside a 2 GiB memory cgroup:
// one BatchGet naming one 4 MB record 1000 times, 256 unread BatchGets,
// 4 connections × 256 unread Gets, 256 unread Scans, and 2,000 follow Scans
// on one shard appended to about once a second, with a bystander appending
// and reading 1 KiB every 200 ms. Once in plaintext (the bystander shares
// the attacker's address, so its share) and once under mTLS with the
// attacker and the bystander as distinct identities. Peak RSS must stay
// within 60% of the cgroup's limit, nothing is OOM-killed, and the budget
// is released within the send timeout. Root, cgroup v1 or v2, and minutes:
// ROLLOUTD_ATTACK_GB=1.
func TestReadAttacksGB(t *testing.T) {
	if os.Getenv("ROLLOUTD_ATTACK_GB") == "" {
		t.Skip("set ROLLOUTD_ATTACK_GB=1 to run the read attacks at full scale (minutes, root)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "rolloutd")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/rolloutd").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, mode := range []string{"plaintext", "mtls"} {
		t.Run(mode, func(t *testing.T) {
			if load, err := os.ReadFile("/proc/loadavg"); err == nil {
				t.Logf("%s: load average at the start %s", mode, strings.TrimSpace(string(load)))
			}
			readAttacksGB(t, startAttackTarget(t, bin, mode == "mtls"))
		})
	}
}

const (
	attackLimit       = 2 << 30
	attackSendTimeout = 30 * time.Second
)

func readAttacksGB(t *testing.T, tg *attackTarget) {
	const (
		recordBytes = 4_190_000
		streams     = 256
	)
	c := dial(t, tg.addr, tg.attackerCreds)
	ctx := context.Background()
	for i := range 4 {
		rec := &rolloutv1.Record{Id: fmt.Sprintf("id-%d", i), Content: strings.Repeat("x", recordBytes-64)}
		if _, err := c.Append(ctx, &rolloutv1.AppendRequest{Shard: "big", Records: []*rolloutv1.Record{rec}}); err != nil {
			t.Fatal(err)
		}
	}
	by := startBystander(t, tg.addr, tg.bystanderCreds)
	budgetInUse := func() float64 { return scrape(t, tg.metrics, "rolloutd_request_budget_in_use_bytes") }

	// Attack 1: one id 1000 times.
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = "id-0"
	}
	_, err := c.BatchGet(ctx, &rolloutv1.BatchGetRequest{Shard: "big", Ids: ids})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("BatchGet of one id 1000 times: %v, want INVALID_ARGUMENT", err)
	}

	attack := func(name string, conns int, req func(*rawH2, uint32)) {
		start := time.Now()
		by.mark()
		var atk []*rawH2
		for range conns {
			a := dialRawH2(t, tg.addr, tg.attackerTLS)
			a.zeroWindow()
			atk = append(atk, a)
		}
		for _, a := range atk {
			for range streams {
				req(a, a.open(name))
			}
		}
		time.Sleep(5 * time.Second)
		now, peak := tg.rss()
		held := budgetInUse()
		for _, a := range atk {
			if !a.closed(attackSendTimeout + 10*time.Second - time.Since(start)) {
				t.Errorf("%s: a connection is still open %s after the attack began (send timeout %s)", name, time.Since(start), attackSendTimeout)
			}
		}
		closedAt := time.Since(start)
		time.Sleep(2 * time.Second)
		after := budgetInUse()
		nowAfter, _ := tg.rss()
		t.Logf("%s × %d on %d connection(s): after 5s RSS %d MiB (peak so far %d MiB), budget in use %.0f MiB; connections closed by %s; 2s later budget in use %.0f bytes, RSS %d MiB; bystander meanwhile: %s",
			name, streams, conns, now>>10, peak>>10, held/(1<<20), closedAt.Round(100*time.Millisecond), after, nowAfter>>10, by.summarySinceMark())
		if after > 1<<20 {
			t.Errorf("%s: budget in use %.0f bytes after the connections closed", name, after)
		}
	}
	attack("/rollout.v1.RolloutService/BatchGet", 1, func(a *rawH2, id uint32) {
		a.call(id, &rolloutv1.BatchGetRequest{Shard: "big", Ids: []string{"id-0", "id-1", "id-2", "id-3"}})
	})
	attack(getMethod, 4, func(a *rawH2, id uint32) { a.call(id, &rolloutv1.GetRequest{Shard: "big", Id: "id-0"}) })
	attack(scanMethod, 1, func(a *rawH2, id uint32) { a.call(id, &rolloutv1.ScanRequest{Shard: "big"}) })

	by.mark()
	followAttackGB(t, tg)
	t.Logf("bystander during the follow attack: %s", by.summarySinceMark())

	tg.checkAlive(t)
	_, peak := tg.rss()
	by.stop()
	t.Logf("peak RSS %d MiB (%.0f%% of %d MiB); cgroup peak usage %d MiB; OOM kills %d; bystander throughout: %s",
		peak>>10, 100*float64(peak<<10)/attackLimit, attackLimit>>20, tg.cg.peak()>>20, tg.cg.oomKills(), by.summary())
	if peak<<10 > attackLimit*6/10 {
		t.Errorf("peak RSS %d MiB, over 60%% of the %d MiB limit", peak>>10, attackLimit>>20)
	}
	if n := tg.cg.oomKills(); n > 0 {
		t.Errorf("%d OOM kills in the cgroup", n)
	}
	if tg.mtls {
		if p99, errs := by.p99(); p99 > time.Second || errs > 0 {
			t.Errorf("under mTLS the bystander (its own identity) had p99 %s and %d errors, want p99 ≤ 1s and none", p99, errs)
		}
	}
}

// memoryCgroup is a memory cgroup (v1 or v2) made for one test.
type memoryCgroup struct{ dir, procs, v string }

func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	name := fmt.Sprintf("rolloutd-attack-%d-%d", os.Getpid(), time.Now().UnixNano())
	var cg *memoryCgroup
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		cg = &memoryCgroup{dir: "/sys/fs/cgroup/" + name, v: "2"}
	} else {
		cg = &memoryCgroup{dir: "/sys/fs/cgroup/memory/" + name, v: "1"}
	}
	cg.procs = cg.dir + "/cgroup.procs"
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		t.Skipf("cannot make a memory cgroup (root is needed): %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(cg.dir) })
	files := map[string]string{"memory.max": strconv.FormatInt(limit, 10), "memory.swap.max": "0"}
	if cg.v == "1" {
		files = map[string]string{"memory.limit_in_bytes": strconv.FormatInt(limit, 10)}
	}
	for f, v := range files {
		if err := os.WriteFile(cg.dir+"/"+f, []byte(v), 0o644); err != nil {
			t.Fatalf("%s/%s: %v", cg.dir, f, err)
		}
	}
	return cg
}

func (cg *memoryCgroup) read(f string) string {
	b, _ := os.ReadFile(cg.dir + "/" + f)
	return string(b)
}

func (cg *memoryCgroup) peak() int64 {
	f := "memory.peak"
	if cg.v == "1" {
		f = "memory.max_usage_in_bytes"
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(cg.read(f)), 10, 64)
	return n
}

func (cg *memoryCgroup) oomKills() int {
	f := "memory.events"
	if cg.v == "1" {
		f = "memory.oom_control"
	}
	for _, line := range strings.Split(cg.read(f), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == "oom_kill" {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitServing(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rolloutd does not listen on %s", addr)
		}
	}
}

// procStatusKB is a kB field of /proc/pid/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// scrape reads one unlabelled metric from the metrics listener.
func scrape(t *testing.T, addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Errorf("scrape: %v", err)
		return -1
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// bystander appends 1 KiB and reads it back every 200 ms.
type bystander struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	lat    []time.Duration
	errs   map[codes.Code]int
	// since is where lat and errs stood at the last mark.
	sinceLat, sinceErrs int
}

func startBystander(t *testing.T, addr string, creds credentials.TransportCredentials) *bystander {
	c := dial(t, addr, creds)
	ctx, cancel := context.WithCancel(context.Background())
	b := &bystander{cancel: cancel, done: make(chan struct{}), errs: map[codes.Code]int{}}
	go func() {
		defer close(b.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			start := time.Now()
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			id := fmt.Sprintf("b-%d", i)
			_, err := c.Append(cctx, &rolloutv1.AppendRequest{Shard: "bystander", Records: []*rolloutv1.Record{{Id: id, Content: strings.Repeat("b", 1024)}}})
			if err == nil {
				_, err = c.Get(cctx, &rolloutv1.GetRequest{Shard: "bystander", Id: id})
			}
			ccancel()
			b.mu.Lock()
			if err != nil && ctx.Err() == nil {
				b.errs[status.Code(err)]++
			} else if err == nil {
				b.lat = append(b.lat, time.Since(start))
			}
			b.mu.Unlock()
		}
	}()
	return b
}

func (b *bystander) stop() {
	b.cancel()
	<-b.done
}

func (b *bystander) summary() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return latencySummary(b.lat, b.nerrs(), fmt.Sprint(b.errs))
}

// mark starts a new period for summarySinceMark.
func (b *bystander) mark() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sinceLat, b.sinceErrs = len(b.lat), b.nerrs()
}

func (b *bystander) summarySinceMark() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.nerrs() - b.sinceErrs
	return latencySummary(b.lat[b.sinceLat:], n, fmt.Sprintf("%d", n))
}

func (b *bystander) nerrs() int {
	n := 0
	for _, c := range b.errs {
		n += c
	}
	return n
}

// p99 is the p99 over the whole run, and the number of failed calls.
func (b *bystander) p99() (time.Duration, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lat := slices.Clone(b.lat)
	slices.Sort(lat)
	if len(lat) == 0 {
		return time.Hour, b.nerrs()
	}
	return lat[int(0.99*float64(len(lat)-1))], b.nerrs()
}

func latencySummary(lat []time.Duration, nerrs int, errs string) string {
	lat = slices.Clone(lat)
	slices.Sort(lat)
	if len(lat) == 0 {
		return fmt.Sprintf("no success, errors %s", errs)
	}
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	return fmt.Sprintf("%d append+get ok, p50 %s, p99 %s, max %s; %d errors %s", len(lat), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), nerrs, errs)
}
