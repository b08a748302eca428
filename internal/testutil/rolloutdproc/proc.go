// Package rolloutdproc builds the real rolloutd binary and runs it as a
// child process for end-to-end tests: on free loopback ports, with its log
// kept, its listener addresses read from that log, its health checked, and
// a data race or panic it printed failing the test.
package rolloutdproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Build compiles cmd/rolloutd into dir, with the race detector when the
// calling tests run with it, and returns the binary's path.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "rolloutd")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "github.com/rolloutd/rolloutd/cmd/rolloutd")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Options says how to start one rolloutd.
type Options struct {
	// Name names the process in failures; default "rolloutd".
	Name string
	// Args follow the defaults: --listen and --metrics-listen on free
	// loopback ports, --drain-delay 100ms.
	Args []string
	// Env is added to the inherited environment, less DropEnv.
	Env []string
	// DropEnv: inherited variables with these prefixes are left out, so
	// that only Env can supply them.
	DropEnv []string
	// StartTimeout bounds the wait for the listener lines; default 60 s.
	StartTimeout time.Duration
	// Bare skips the insecure client and the health check, for callers
	// that know which transport to use.
	Bare bool
}

// Proc is one running rolloutd.
type Proc struct {
	Name        string
	Cmd         *exec.Cmd
	GRPCAddr    string
	MetricsAddr string
	// Conn and Client are an insecure connection to GRPCAddr (nil when
	// Bare).
	Conn   *grpc.ClientConn
	Client rolloutv1.RolloutServiceClient

	t       testing.TB
	exited  chan struct{}
	exitErr error

	mu  sync.Mutex
	log bytes.Buffer
}

// Start starts binary and waits until it logs its listeners and, unless
// Bare, reports SERVING. The process is killed when the test ends.
func Start(t testing.TB, binary string, o Options) *Proc {
	t.Helper()
	p, err := launch(binary, o, func(p *Proc) { t.Cleanup(p.Kill) })
	if p != nil {
		p.t = t
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// launch starts binary as Start describes; started, when set, is called
// once the process runs and before it is waited for. On a failure after
// the start, the process is left to the caller's started hook, or killed.
func launch(binary string, o Options, started func(*Proc)) (p *Proc, err error) {
	if o.Name == "" {
		o.Name = "rolloutd"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--drain-delay", "100ms"}, o.Args...)
	p = &Proc{Name: o.Name, Cmd: exec.Command(binary, args...), exited: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !hasAnyPrefix(kv, o.DropEnv) {
			p.Cmd.Env = append(p.Cmd.Env, kv)
		}
	}
	// The race detector sleeps a second before exiting, to let other
	// goroutines report; that would count against --shutdown-timeout.
	p.Cmd.Env = append(p.Cmd.Env, "GORACE=atexit_sleep_ms=0")
	p.Cmd.Env = append(p.Cmd.Env, o.Env...)
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err = p.Cmd.Start(); err != nil {
		return nil, err
	}
	addrs := make(chan [2]string, 1)
	go p.readLog(stderr, addrs)
	if started == nil {
		started = func(p *Proc) {}
		defer func() {
			if err != nil {
				p.kill()
			}
		}()
	}
	started(p)
	select {
	case a := <-addrs:
		p.GRPCAddr, p.MetricsAddr = a[0], a[1]
	case <-p.exited:
		return p, fmt.Errorf("%s exited at startup (%v):\n%s", p.Name, p.exitErr, p.Output())
	case <-time.After(o.StartTimeout):
		return p, fmt.Errorf("%s did not start:\n%s", p.Name, p.Output())
	}
	if o.Bare {
		return p, nil
	}
	return p, p.dialHealthy()
}

// dialHealthy connects the insecure client and waits for SERVING.
func (p *Proc) dialHealthy() (err error) {
	p.Conn, err = grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	p.Client = rolloutv1.NewRolloutServiceClient(p.Conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: rolloutv1.RolloutService_ServiceDesc.ServiceName}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s health: %v %v\n%s", p.Name, resp, err, p.Output())
	}
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// readLog keeps the process's log and reports the listener addresses from
// its "serving gRPC" and "serving metrics" lines.
func (p *Proc) readLog(r io.Reader, addrs chan<- [2]string) {
	var grpcAddr, metricsAddr string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.mu.Lock()
		p.log.Write(line)
		p.log.WriteByte('\n')
		p.mu.Unlock()
		var e struct{ Msg, Addr string }
		if json.Unmarshal(line, &e) == nil {
			switch e.Msg {
			case "serving gRPC":
				grpcAddr = e.Addr
			case "serving metrics":
				metricsAddr = e.Addr
			}
			if grpcAddr != "" && metricsAddr != "" && addrs != nil {
				addrs <- [2]string{grpcAddr, metricsAddr}
				addrs = nil
			}
		}
	}
	p.exitErr = p.Cmd.Wait()
	close(p.exited)
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitErr is the process's exit error; valid once Exited is closed.
func (p *Proc) ExitErr() error {
	<-p.exited
	return p.exitErr
}

// Output is the process's log so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Signal sends sig and waits up to within (plus a margin) for the process
// to exit. It returns the exit code (-1 when killed by a signal) and how
// long the exit took.
func (p *Proc) Signal(sig syscall.Signal, within time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(within + 10*time.Second):
		p.t.Fatalf("%s did not exit within %v of %v:\n%s", p.Name, within, sig, p.Output())
	}
	return p.Cmd.ProcessState.ExitCode(), time.Since(start)
}

// Kill ends the process, if it still runs, and closes the client. A data
// race or panic the binary reported fails the test; a failed test gets the
// end of the log.
func (p *Proc) Kill() {
	p.kill()
	if out := p.Output(); strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
		p.t.Errorf("%s reported a data race or a panic", p.Name)
	}
	if p.t.Failed() {
		out := p.Output()
		if len(out) > 20000 {
			out = "…" + out[len(out)-20000:]
		}
		p.t.Logf("%s log (%s):\n%s", p.Name, p.GRPCAddr, out)
	}
}

// kill ends the process, if it still runs, and closes the client.
func (p *Proc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
	if p.Conn != nil {
		_ = p.Conn.Close()
	}
}

// Metric sums a metric's samples whose label text contains match, from the
// process's /metrics.
func (p *Proc) Metric(name, match string) float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		p.t.Errorf("%s /metrics: %v", p.Name, err)
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		if strings.Contains(m[1], match) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// LogAddr waits for a log line with message msg and returns its addr.
func (p *Proc) LogAddr(msg string) string {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, line := range strings.Split(p.Output(), "\n") {
			var e struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &e) == nil && e.Msg == msg && e.Addr != "" {
				return e.Addr
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("%s: no %q line:\n%s", p.Name, msg, p.Output())
	return ""
}

// WaitLog waits until the log matches re.
func (p *Proc) WaitLog(re string) {
	p.t.Helper()
	r := regexp.MustCompile(re)
	deadline := time.Now().Add(10 * time.Second)
	for !r.MatchString(p.Output()) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s: the log never matched %q:\n%s", p.Name, re, p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
