package reliability

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
	"github.com/rolloutd/rolloutd/internal/azure"
)

// The rolloutd binary is built once per package run, on first use.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// rolloutdBinary builds cmd/rolloutd once per package run, with the race
// detector when the tests have it, and returns its path.
func rolloutdBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rolloutd-reliability-")
		if err != nil {
			binErr = err
			return
		}
		atExit = append(atExit, func() { os.RemoveAll(dir) })
		binPath = filepath.Join(dir, "rolloutd")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "github.com/rolloutd/rolloutd/cmd/rolloutd")...).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is one running rolloutd binary.
type proc struct {
	t           testing.TB
	name        string
	cmd         *exec.Cmd
	grpcAddr    string
	metricsAddr string
	conn        *grpc.ClientConn
	client      rolloutv1.RolloutServiceClient
	exited      chan struct{}
	exitErr     error

	mu  sync.Mutex
	log bytes.Buffer
}

// startProc starts the rolloutd binary on the container (listeners on free
// loopback ports) with extra flags, and waits until it reports SERVING.
func startProc(t testing.TB, name, container string, args ...string) *proc {
	t.Helper()
	az := sharedAzurite(t)
	args = append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--store", "azblob://" + container, "--drain-delay", "100ms"}, args...)
	p := &proc{t: t, name: name, cmd: exec.Command(rolloutdBinary(t), args...), exited: make(chan struct{})}
	// The race detector sleeps a second before exiting, to let other
	// goroutines report; that would count against --shutdown-timeout.
	p.cmd.Env = append(os.Environ(), "AZURE_STORAGE_CONNECTION_STRING="+az.ConnectionString, "GORACE=atexit_sleep_ms=0")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 1)
	go p.readLog(stderr, addrs)
	t.Cleanup(p.kill)
	select {
	case a := <-addrs:
		p.grpcAddr, p.metricsAddr = a[0], a[1]
	case <-p.exited:
		t.Fatalf("%s exited at startup (%v):\n%s", name, p.exitErr, p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start:\n%s", name, p.output())
	}
	p.conn, err = grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.client = rolloutv1.NewRolloutServiceClient(p.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "rollout.v1.RolloutService"}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("%s health: %v %v\n%s", name, resp, err, p.output())
	}
	return p
}

// readLog keeps the process's log and reports its listener addresses.
func (p *proc) readLog(r io.Reader, addrs chan<- [2]string) {
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
	p.exitErr = p.cmd.Wait()
	close(p.exited)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// signal sends sig and waits up to within (plus a margin) for the process
// to exit. It returns the exit code (-1 when killed by a signal) and how
// long the exit took.
func (p *proc) signal(sig syscall.Signal, within time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(within + 10*time.Second):
		p.t.Fatalf("%s did not exit within %v of %v:\n%s", p.name, within, sig, p.output())
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

// kill ends the process, if it still runs, and closes the client. A data
// race the binary reported fails the test.
func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
	if p.conn != nil {
		p.conn.Close()
	}
	if out := p.output(); strings.Contains(out, "WARNING: DATA RACE") || strings.Contains(out, "panic:") {
		p.t.Errorf("%s reported a data race or a panic", p.name)
	}
	if p.t.Failed() {
		out := p.output()
		if len(out) > 20000 {
			out = "…" + out[len(out)-20000:]
		}
		p.t.Logf("%s log (%s):\n%s", p.name, p.grpcAddr, out)
	}
}

// metric sums a metric's samples whose labels contain match, from the
// process's /metrics.
func (p *proc) metric(name, match string) float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		p.t.Errorf("%s /metrics: %v", p.name, err)
		return 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? (\S+)$`)
	var sum float64
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		if strings.Contains(m[1], match) {
			v, _ := strconv.ParseFloat(m[2], 64)
			sum += v
		}
	}
	return sum
}

// directStore opens the container straight on Azurite, to check what the
// processes stored.
func directStore(t testing.TB, container string) *azure.Store {
	t.Helper()
	s, err := azure.New(context.Background(), azure.Config{Container: container, ConnectionString: sharedAzurite(t).ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// containerName is a fresh Azure container name for one run.
func containerName(scenario string, seed int64) string {
	return fmt.Sprintf("%s-%d-%d", scenario, seed, time.Now().UnixNano()%1_000_000)
}
