// Package azurite starts Azurite, the Azure Storage emulator, for tests.
//
// Every test that touches Azure runs against a real Azurite process. The
// harness installs the pinned Azurite (test/azurite, npm ci under a file lock)
// when it is missing, so a plain `go test ./...` works as well as `make test`.
// It never skips: without Node.js and npm the test fails and says how to
// install them.
//
// Each instance listens on its own loopback port (Azurite is started with
// --blobPort 0 and the chosen port is read from its output), so parallel test
// packages do not clash.
//
// Share one instance per test package from TestMain:
//
//	var az *azurite.Instance
//
//	func TestMain(m *testing.M) {
//		inst, err := azurite.StartMain(azurite.Options{})
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		az = inst
//		code := m.Run()
//		inst.Stop()
//		os.Exit(code)
//	}
//
// or start one for a single test with Start(t, azurite.Options{}).
package azurite

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The well-known development account that Azurite serves. The key is public
// (it is published in Azurite's and Azure's documentation) and only ever
// valid against the emulator.
const (
	AccountName = "devstoreaccount1"
	AccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Options configure one Azurite instance. The zero value is an in-memory,
// plain-HTTP instance.
type Options struct {
	// OnDisk persists blobs in a directory (--location) instead of memory.
	// The directory is Location, or a fresh temporary one (removed on Stop)
	// when Location is "".
	OnDisk   bool
	Location string

	// HTTPS serves TLS with a fresh self-signed certificate for 127.0.0.1
	// (--cert/--key), as for benchmarks where connection setup matters.
	// Instance.RootCAs trusts it.
	HTTPS bool
	// RSA makes the HTTPS certificate's key RSA-2048, like Azure's, instead
	// of ECDSA P-256, so that a client's TLS handshakes cost what they cost
	// against Azure (the server's RSA signature dominates a handshake).
	RSA bool
	// OAuth accepts bearer tokens (--oauth basic): any unexpired JWT with a
	// storage audience and an Entra issuer, signature unchecked, as the
	// azcore.TokenCredential path of a client needs. It requires HTTPS.
	OAuth bool

	// ExtentMemoryLimitMB bounds in-memory blob content (--extentMemoryLimit).
	// 0 means 256. Ignored with OnDisk.
	ExtentMemoryLimitMB int

	// KeepAliveTimeout is Azurite's HTTP keep-alive timeout
	// (--blobKeepAliveTimeout, whole seconds). 0 keeps Azurite's default (5 s).
	KeepAliveTimeout time.Duration

	// StartTimeout bounds startup, after any installation (npm ci has its
	// own 10-minute bound). 0 means 60 s: startup itself takes about 1.5 s;
	// the margin is for loaded machines running many test packages at once.
	StartTimeout time.Duration
}

// Instance is one running Azurite process.
type Instance struct {
	// ConnectionString addresses the dev account on this instance, for
	// azblob's NewClientFromConnectionString and rolloutd's azure.Config.
	ConnectionString string
	// BlobEndpoint is the account's blob service URL,
	// e.g. http://127.0.0.1:41234/devstoreaccount1.
	BlobEndpoint string
	// Addr is the host:port Azurite listens on.
	Addr string
	// RootCAs trusts the instance's certificate when HTTPS is set; nil otherwise.
	RootCAs *x509.CertPool
	// Location is the on-disk workspace, or "" for an in-memory instance.
	Location string

	cmd     *exec.Cmd
	out     *outputWriter
	exited  chan struct{} // closed once the process has been waited for
	waitErr error         // valid after exited is closed
	cleanup []func()

	stopOnce sync.Once
	stopErr  error
}

// Start starts Azurite for one test and stops it when the test ends. It
// fails the test (never skips) if Azurite cannot be installed or started.
func Start(tb testing.TB, opts Options) *Instance {
	tb.Helper()
	inst, err := StartMain(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("azurite output (%s):\n%s", inst.Addr, inst.Output())
		}
		if err := inst.Stop(); err != nil {
			tb.Errorf("stopping azurite: %v", err)
		}
	})
	return inst
}

// StartMain starts Azurite outside any test, typically from TestMain so that
// a whole package shares one instance. The caller must call Stop.
func StartMain(opts Options) (*Instance, error) {
	if opts.OAuth && !opts.HTTPS {
		return nil, errors.New("azurite: OAuth needs HTTPS (Azurite refuses bearer tokens over HTTP)")
	}
	if opts.RSA && !opts.HTTPS {
		return nil, errors.New("azurite: RSA selects the HTTPS certificate's key; it needs HTTPS")
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	// npm ci can take a minute on a cold cache; it has its own bound, and
	// the start timeout counts from after it.
	dir, err := ensureInstalled()
	if err != nil {
		return nil, err
	}
	bin := binPath(dir)

	inst := &Instance{exited: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			inst.runCleanup()
		}
	}()
	args, err := inst.args(opts)
	if err != nil {
		return nil, err
	}

	inst.out = newOutputWriter()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = inst.out
	cmd.Stderr = inst.out
	cmd.Env = os.Environ()
	// If Azurite ever forks and a child keeps the output pipe open, Wait
	// must not hang on it.
	cmd.WaitDelay = 5 * time.Second
	setDeathSignal(cmd)
	inst.cmd = cmd

	if err := inst.startProcess(); err != nil {
		return nil, fmt.Errorf("azurite: starting %s: %w", bin, err)
	}
	if err := inst.awaitListening(timeout, opts.HTTPS); err != nil {
		return nil, err
	}
	ok = true
	return inst, nil
}

// args are Azurite's command-line arguments for opts. The temporary
// directories they name are removed by the instance's cleanup.
func (inst *Instance) args(opts Options) ([]string, error) {
	args := []string{"--blobHost", "127.0.0.1", "--blobPort", "0",
		"--skipApiVersionCheck", "--disableTelemetry", "--silent"}
	if opts.OnDisk {
		loc := opts.Location
		if loc == "" {
			tmp, err := os.MkdirTemp("", "azurite-data-")
			if err != nil {
				return nil, fmt.Errorf("azurite: %w", err)
			}
			inst.cleanup = append(inst.cleanup, func() { _ = os.RemoveAll(tmp) })
			loc = tmp
		}
		inst.Location = loc
		args = append(args, "--location", loc)
	} else {
		limit := opts.ExtentMemoryLimitMB
		if limit <= 0 {
			limit = 256
		}
		args = append(args, "--inMemoryPersistence", "--extentMemoryLimit", strconv.Itoa(limit))
	}
	if opts.KeepAliveTimeout > 0 {
		secs := max(1, int(opts.KeepAliveTimeout/time.Second))
		args = append(args, "--blobKeepAliveTimeout", strconv.Itoa(secs))
	}
	if opts.OAuth {
		args = append(args, "--oauth", "basic")
	}
	if opts.HTTPS {
		certDir, err := os.MkdirTemp("", "azurite-tls-")
		if err != nil {
			return nil, fmt.Errorf("azurite: %w", err)
		}
		inst.cleanup = append(inst.cleanup, func() { _ = os.RemoveAll(certDir) })
		certFile, keyFile, pool, err := writeSelfSignedCert(certDir, opts.RSA)
		if err != nil {
			return nil, fmt.Errorf("azurite: generating a TLS certificate: %w", err)
		}
		inst.RootCAs = pool
		args = append(args, "--cert", certFile, "--key", keyFile)
	}
	return args, nil
}

// awaitListening waits up to timeout for the started process to say where
// it listens. On failure the process is stopped and its cleanup run.
func (inst *Instance) awaitListening(timeout time.Duration, https bool) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case url := <-inst.out.listening:
		if err := inst.setEndpoint(url, https); err != nil {
			_ = inst.Stop()
			return err
		}
		return nil
	case <-inst.exited:
		inst.runCleanup()
		return fmt.Errorf("azurite: exited during startup (%v); output:\n%s", inst.waitErr, inst.Output())
	case <-timer.C:
		_ = inst.Stop()
		return fmt.Errorf("azurite: not listening after %v; output:\n%s", timeout, inst.Output())
	}
}

// startProcess starts the child on a goroutine that stays locked to its OS
// thread until the child has exited. Linux delivers the parent-death signal
// when the thread that forked the child exits, not the process, so the thread
// must outlive the child.
func (inst *Instance) startProcess() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := inst.cmd.Start(); err != nil {
			started <- err
			close(inst.exited)
			return
		}
		started <- nil
		inst.waitErr = inst.cmd.Wait()
		close(inst.exited)
	}()
	return <-started
}

func (inst *Instance) setEndpoint(url string, https bool) error {
	scheme, addr, ok := strings.Cut(url, "://")
	if !ok || addr == "" || (scheme == "https") != https {
		return fmt.Errorf("azurite: unexpected listen address %q", url)
	}
	inst.Addr = addr
	inst.BlobEndpoint = url + "/" + AccountName
	inst.ConnectionString = fmt.Sprintf(
		"DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;",
		scheme, AccountName, AccountKey, inst.BlobEndpoint)
	return nil
}

// Stop terminates Azurite (SIGTERM, then SIGKILL after 5 s), waits for it to
// exit and removes its temporary directories (not a caller's Location). It
// is idempotent and safe to call concurrently.
func (inst *Instance) Stop() error {
	inst.stopOnce.Do(func() {
		defer inst.runCleanup()
		select {
		case <-inst.exited:
			// Exited on its own: that is a crash unless we stopped it.
			inst.stopErr = fmt.Errorf("azurite exited early (%v); output:\n%s", inst.waitErr, inst.Output())
			return
		default:
		}
		if err := inst.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			inst.stopErr = fmt.Errorf("azurite: %w", err)
		}
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case <-inst.exited:
			return
		case <-t.C:
		}
		_ = inst.cmd.Process.Kill()
		<-inst.exited
	})
	return inst.stopErr
}

func (inst *Instance) runCleanup() {
	for i := len(inst.cleanup) - 1; i >= 0; i-- {
		inst.cleanup[i]()
	}
	inst.cleanup = nil
}

// Output returns what Azurite has printed so far (bounded to its last 64 KiB).
func (inst *Instance) Output() string {
	if inst.out == nil {
		return ""
	}
	return inst.out.String()
}

var listenRE = regexp.MustCompile(`successfully listens on (https?://[^\s]+)`)

// outputWriter collects Azurite's output and reports the listen address.
// exec.Cmd copies the child's pipe into it on a goroutine that Wait joins.
type outputWriter struct {
	mu        sync.Mutex
	buf       bytes.Buffer // the last outputLimit bytes
	line      []byte       // the current partial line
	found     bool
	listening chan string // receives the listen URL once
}

const outputLimit = 64 << 10

func newOutputWriter() *outputWriter {
	return &outputWriter{listening: make(chan string, 1)}
}

func (w *outputWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if over := w.buf.Len() - outputLimit; over > 0 {
		w.buf.Next(over)
	}
	if w.found {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			if len(w.line) > 4096 { // no line is this long; drop it
				w.line = w.line[:0]
			}
			return len(p), nil
		}
		if m := listenRE.FindSubmatch(w.line[:i]); m != nil {
			w.found = true
			w.line = nil
			w.listening <- string(m[1])
			return len(p), nil
		}
		w.line = w.line[i+1:]
	}
}

func (w *outputWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
