package rolloutdproc

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake writes a script that logs like rolloutd and then runs tail.
func fake(t *testing.T, tail string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-rolloutd")
	script := `#!/bin/sh
echo '{"msg":"serving gRPC","addr":"127.0.0.1:1"}' >&2
echo '{"msg":"serving metrics","addr":"127.0.0.1:2"}' >&2
echo "args: $*" >&2
` + tail + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStartReadsListenersAndKeepsTheLog(t *testing.T) {
	p := Start(t, fake(t, "exec sleep 60"), Options{Name: "fake", Args: []string{"--x"}, Bare: true, StartTimeout: 10 * time.Second})
	if p.GRPCAddr != "127.0.0.1:1" || p.MetricsAddr != "127.0.0.1:2" {
		t.Fatalf("addresses %q %q", p.GRPCAddr, p.MetricsAddr)
	}
	p.WaitLog(`args: .*--listen 127\.0\.0\.1:0 .*--x`)
	if got := p.LogAddr("serving metrics"); got != "127.0.0.1:2" {
		t.Fatalf("LogAddr = %q", got)
	}
	code, _ := p.Signal(syscall.SIGTERM, 5*time.Second)
	if code != -1 {
		t.Fatalf("exit code after SIGTERM = %d, want -1 (killed by the signal)", code)
	}
}

func TestKillReportsAPanicInTheLog(t *testing.T) {
	ft := &fakeT{T: t}
	p := Start(ft, fake(t, "echo 'panic: boom' >&2; exec sleep 60"), Options{Bare: true, StartTimeout: 10 * time.Second})
	p.WaitLog("panic: boom")
	p.Kill()
	if !strings.Contains(ft.errors, "reported a data race or a panic") {
		t.Fatalf("Kill did not fail the test on a panic in the log; errors: %q", ft.errors)
	}
}

// fakeT records Errorf instead of failing, and runs cleanups itself.
type fakeT struct {
	*testing.T
	errors string
}

func (f *fakeT) Errorf(format string, args ...any) { f.errors += format }
func (f *fakeT) Failed() bool                      { return false }

func TestLaunchStopsOnSIGTERMAndReadsCPU(t *testing.T) {
	p, err := Launch(fake(t, "exec sleep 60"), Options{Name: "fake", Bare: true, StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if cpu, err := p.CPUSeconds(); err != nil || cpu < 0 {
		t.Errorf("CPUSeconds = %v, %v", cpu, err)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
}

func TestLaunchFailsWhenTheProcessExitsAtStartup(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dies")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho 'no store' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Launch(path, Options{Bare: true, StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited at startup") || !strings.Contains(err.Error(), "no store") {
		t.Fatalf("Launch = %v, want an error with the log", err)
	}
}

func TestStopReportsAPanicInTheLog(t *testing.T) {
	p, err := Launch(fake(t, "echo 'panic: boom' >&2; exec sleep 60"), Options{Bare: true, StartTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(p.Output(), "panic: boom") {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Stop(5 * time.Second); err == nil || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("Stop = %v, want the panic reported", err)
	}
}

func TestProcessCPUSecondsCountsThisProcess(t *testing.T) {
	before, err := ProcessCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for x, end := 0, time.Now().Add(100*time.Millisecond); time.Now().Before(end); x++ {
		_ = x * x
	}
	after, err := ProcessCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 0.02 {
		t.Fatalf("CPU after 100 ms of spinning grew by %v s", after-before)
	}
}
