package azurite

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain()
		return
	}
	goleak.VerifyTestMain(m)
}

// roundTrip creates a container, writes a blob and reads it back through
// the instance's connection string.
func roundTrip(t *testing.T, inst *Instance, container, blobName string, write bool) string {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: inst.RootCAs}}
	defer tr.CloseIdleConnections()
	c, err := azblob.NewClientFromConnectionString(inst.ConnectionString, &azblob.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: &http.Client{Transport: tr},
			Retry:     policy.RetryOptions{MaxRetries: -1},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if write {
		if _, err := c.CreateContainer(ctx, container, nil); err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		if _, err := c.UploadBuffer(ctx, container, blobName, []byte("hello "+blobName), nil); err != nil {
			t.Fatalf("Upload: %v", err)
		}
	}
	resp, err := c.DownloadStream(ctx, container, blobName, nil)
	if err != nil {
		t.Fatalf("Download: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStartInMemory(t *testing.T) {
	start := time.Now()
	inst := Start(t, Options{})
	t.Logf("azurite listening on %s after %v", inst.Addr, time.Since(start))
	if !strings.HasPrefix(inst.BlobEndpoint, "http://127.0.0.1:") || !strings.HasSuffix(inst.BlobEndpoint, "/"+AccountName) {
		t.Fatalf("BlobEndpoint = %q", inst.BlobEndpoint)
	}
	if !strings.Contains(inst.ConnectionString, "BlobEndpoint="+inst.BlobEndpoint+";") ||
		!strings.Contains(inst.ConnectionString, "AccountKey="+AccountKey+";") {
		t.Fatalf("ConnectionString = %q", inst.ConnectionString)
	}
	if got := roundTrip(t, inst, "mem", "b", true); got != "hello b" {
		t.Fatalf("read back %q", got)
	}
}

func TestStopIsIdempotentAndEndsTheProcess(t *testing.T) {
	inst, err := StartMain(Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid := inst.cmd.Process.Pid
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := inst.Stop(); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}()
	}
	wg.Wait()
	if alive(pid) {
		t.Fatalf("azurite (pid %d) still runs after Stop", pid)
	}
}

func TestOnDiskSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	first := Start(t, Options{OnDisk: true, Location: dir})
	roundTrip(t, first, "disk", "kept", true)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second := Start(t, Options{OnDisk: true, Location: dir})
	if got := roundTrip(t, second, "disk", "kept", false); got != "hello kept" {
		t.Fatalf("after restart read %q", got)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Stop removed the caller's Location: %v", err)
	}
}

func TestHTTPS(t *testing.T) {
	inst := Start(t, Options{HTTPS: true})
	if !strings.HasPrefix(inst.BlobEndpoint, "https://") || inst.RootCAs == nil {
		t.Fatalf("BlobEndpoint %q, RootCAs %v", inst.BlobEndpoint, inst.RootCAs)
	}
	if got := roundTrip(t, inst, "tls", "b", true); got != "hello b" {
		t.Fatalf("read back %q", got)
	}
}

func TestParallelInstancesDoNotClash(t *testing.T) {
	const n = 3
	insts := make([]*Instance, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := StartMain(Options{})
			if err != nil {
				t.Error(err)
				return
			}
			insts[i] = inst
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, inst := range insts {
		if inst == nil {
			continue
		}
		t.Cleanup(func() { _ = inst.Stop() })
		if seen[inst.Addr] {
			t.Fatalf("two instances listen on %s", inst.Addr)
		}
		seen[inst.Addr] = true
		name := fmt.Sprintf("b%d", i)
		if got := roundTrip(t, inst, "par", name, true); got != "hello "+name {
			t.Fatalf("instance %d read back %q", i, got)
		}
	}
}

func TestOutputWriterFindsSplitListenLine(t *testing.T) {
	w := newOutputWriter()
	text := "In-memory extent storage is enabled\nAzurite Blob service is starting on 127.0.0.1:0\n" +
		"Azurite Blob service successfully listens on http://127.0.0.1:40123\nmore\n"
	for i := 0; i < len(text); i += 7 { // arbitrary chunking
		if _, err := w.Write([]byte(text[i:min(i+7, len(text))])); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case url := <-w.listening:
		if url != "http://127.0.0.1:40123" {
			t.Fatalf("listen URL %q", url)
		}
	default:
		t.Fatal("listen line not found")
	}
	if w.String() != text {
		t.Fatalf("Output = %q", w.String())
	}
}

func TestInstalledVersionMatchesPin(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := root + "/test/azurite"
	want, err := npmPackage.Pinned(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want != "3.35.0" {
		t.Errorf("package-lock.json pins azurite %s; 3.35.0 is the newest that runs on Node 20", want)
	}
	if _, err := ensureInstalled(); err != nil {
		t.Fatal(err)
	}
	if got := npmPackage.Installed(dir); got != want {
		t.Fatalf("installed %q, want %q", got, want)
	}
}

const helperEnv = "AZURITE_TEST_HELPER"

// helperMain runs in a child test binary: it starts Azurite, reports its
// pid and waits to be killed.
func helperMain() {
	inst, err := StartMain(Options{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("PID", inst.cmd.Process.Pid)
	time.Sleep(time.Minute)
	_ = inst.Stop()
	os.Exit(0)
}

// TestKilledParentKillsAzurite: when the test binary dies without running
// any cleanup (SIGKILL), Azurite goes with it.
func TestKilledParentKillsAzurite(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux-only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "PID ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper said %q (%v); stderr:\n%s", line, err, stderr.String())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	if err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatalf("azurite pid %d not running before the kill", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for alive(pid) {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("azurite pid %d outlived its killed parent", pid)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// alive reports whether pid runs (a zombie awaiting its reaper is dead).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS != "linux"
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func TestOAuthNeedsHTTPS(t *testing.T) {
	if inst, err := StartMain(Options{OAuth: true}); err == nil {
		_ = inst.Stop()
		t.Fatal("StartMain accepted OAuth over HTTP")
	}
}
