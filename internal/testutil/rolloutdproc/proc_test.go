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
