package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/azure"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

var (
	binary string            // the rolloutd binary under test
	az     *azurite.Instance // shared by the package's tests
)

// TestMain builds the real binary (with -race when the tests have it) and
// starts one Azurite for the package. goleak checks the test process after
// Azurite has stopped.
func TestMain(m *testing.M) {
	code, err := testMain(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func testMain(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "rolloutd-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "rolloutd")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("go build: %v\n%s", err, out)
	}
	az, err = azurite.StartMain(azurite.Options{})
	if err != nil {
		return 0, err
	}
	code := m.Run()
	az.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code, nil
}

// proc is one running rolloutd.
type proc struct {
	t           *testing.T
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

// start starts rolloutd with args (listeners on free loopback ports) and
// env, and waits until its health check reports SERVING.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	args = append([]string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--drain-delay", "100ms"}, args...)
	p := &proc{t: t, cmd: exec.Command(binary, args...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
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
		t.Fatalf("rolloutd exited at startup (%v):\n%s", p.exitErr, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("rolloutd did not start:\n%s", p.output())
	}
	p.conn, err = grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.client = rolloutv1.NewRolloutServiceClient(p.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "rollout.v1.RolloutService"}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v\n%s", resp, err, p.output())
	}
	return p
}

// readLog keeps the process's log and reports the listener addresses from
// its "serving gRPC" and "serving metrics" lines.
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

// signal sends sig and waits for the process to exit, returning its exit
// code and how long it took.
func (p *proc) signal(sig syscall.Signal, within time.Duration) (int, time.Duration) {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(within + 5*time.Second):
		p.t.Fatalf("rolloutd did not exit within %v of %v:\n%s", within, sig, p.output())
	}
	return p.cmd.ProcessState.ExitCode(), time.Since(start)
}

func (p *proc) kill() {
	if p.conn != nil {
		p.conn.Close()
	}
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
	if p.t.Failed() {
		p.t.Logf("rolloutd log (%s):\n%s", p.grpcAddr, p.output())
	}
}

// metric returns the sum of a metric's samples whose label text contains
// match, from the process's /metrics.
func (p *proc) metric(name, match string) float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		p.t.Fatal(err)
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

// azureEnv is the environment that points rolloutd at a fresh container
// of the package's Azurite.
func azureEnv(t *testing.T) (env []string, store string) {
	var b [4]byte
	rand.Read(b[:])
	return []string{"AZURE_STORAGE_CONNECTION_STRING=" + az.ConnectionString}, "azblob://e2e-" + hex.EncodeToString(b[:])
}

// readStore opens the container of store directly, to inspect what the
// servers wrote.
func readStore(t *testing.T, store string) *azure.Store {
	t.Helper()
	s, err := azure.New(context.Background(), azure.Config{Container: strings.TrimPrefix(store, "azblob://"), ConnectionString: az.ConnectionString})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func record(id string) *rolloutv1.Record {
	return &rolloutv1.Record{Id: id, RolloutId: "r1", Content: "content of " + id, OutputTokens: []int32{1, 2}, LossMask: []byte{1, 1}}
}

func appendOne(ctx context.Context, c rolloutv1.RolloutServiceClient, shardName, id string) (*rolloutv1.AppendResult, error) {
	resp, err := c.Append(ctx, &rolloutv1.AppendRequest{Shard: shardName, Records: []*rolloutv1.Record{record(id)}})
	if err != nil {
		return nil, err
	}
	return resp.GetResults()[0], nil
}
