package localstore_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/localstore"
)

// TestHelperProcess is not a test: the tests below start the test binary
// again with LOCALSTORE_HELPER set, to act as a second process.
func TestHelperProcess(t *testing.T) {
	mode, dir := os.Getenv("LOCALSTORE_HELPER"), os.Getenv("LOCALSTORE_DIR")
	if mode == "" {
		t.Skip("helper process only")
	}
	os.Exit(helper(mode, dir))
}

func helper(mode, dir string) int {
	s, err := localstore.Open(dir)
	if err != nil {
		fmt.Println("OPEN FAILED:", err)
		if errors.Is(err, localstore.ErrLocked) {
			return 3
		}
		return 1
	}
	defer s.Close()
	switch mode {
	case "hold": // hold the directory until stdin closes
		fmt.Println("LOCKED")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "write": // CAS one blob forever, reporting each acknowledged version
		ctx := context.Background()
		var etag blob.ETag
		first := uint64(1)
		if b, a, err := s.Get(ctx, "crash/m", blob.GetOptions{}); err == nil {
			etag, first = a.ETag, binary.BigEndian.Uint64(b)+1
		}
		for i := first; ; i++ {
			a, err := s.Put(ctx, "crash/m", crashContent(i), blob.PutOptions{IfMatch: etag, IfNoneMatch: etag == ""})
			if err != nil {
				fmt.Println("PUT FAILED:", err)
				return 1
			}
			if _, err := s.Put(ctx, fmt.Sprintf("crash/g/%06d", i), crashContent(i), blob.PutOptions{IfNoneMatch: true}); err != nil {
				fmt.Println("PUT FAILED:", err)
				return 1
			}
			etag = a.ETag
			fmt.Printf("ACK %d %s\n", i, etag)
		}
	}
	return 2
}

// crashContent is version i of a blob: 256 KiB, self-describing, so a torn
// or mixed file is detectable.
func crashContent(i uint64) []byte {
	b := make([]byte, 256<<10)
	binary.BigEndian.PutUint64(b, i)
	for j := 8; j < len(b); j++ {
		b[j] = byte(i) ^ byte(j)
	}
	return b
}

func checkCrashContent(t *testing.T, name string, b []byte) uint64 {
	t.Helper()
	if len(b) != 256<<10 {
		t.Fatalf("%s: %d bytes, want %d (torn write?)", name, len(b), 256<<10)
	}
	i := binary.BigEndian.Uint64(b)
	for j := 8; j < len(b); j++ {
		if b[j] != byte(i)^byte(j) {
			t.Fatalf("%s: byte %d of version %d is wrong (torn write?)", name, j, i)
		}
	}
	return i
}

func helperCmd(t *testing.T, mode, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "LOCALSTORE_HELPER="+mode, "LOCALSTORE_DIR="+dir)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestSecondProcessRefused(t *testing.T) {
	dir := t.TempDir()
	cmd := helperCmd(t, "hold", dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "LOCKED\n" {
		t.Fatalf("helper said %q, %v", line, err)
	}

	_, err = localstore.Open(dir)
	if !errors.Is(err, localstore.ErrLocked) {
		t.Fatalf("Open while another process holds the directory: %v, want ErrLocked", err)
	}
	abs, _ := filepath.Abs(dir)
	if msg := err.Error(); !strings.Contains(msg, abs) || !strings.Contains(msg, "another rolloutd") {
		t.Fatalf("error %q should name the directory and say another rolloutd holds it", msg)
	}

	// Once the other process lets go, the directory opens.
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	s, err := localstore.Open(dir)
	if err != nil {
		t.Fatalf("Open after the other process exited: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSecondProcessRefusedWhileWeHoldIt(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	out, err := helperCmd(t, "hold", dir).Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("helper opening a held directory: %v, output %q; want exit code 3 (ErrLocked)", err, out)
	}
	if !strings.Contains(string(out), s.Dir()) {
		t.Fatalf("helper's error %q does not name %s", out, s.Dir())
	}
}

func TestSecondOpenInProcessRefused(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := localstore.Open(dir); !errors.Is(err, localstore.ErrLocked) {
		t.Fatalf("second Open in the same process: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t, dir)
	_ = s2
}

// TestCrashLeavesNoTornBlob kills a writer with SIGKILL in the middle of a
// stream of 256 KiB writes, then checks that every blob is whole, that the
// last acknowledged version survived, and that the lock was released.
func TestCrashLeavesNoTornBlob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a writer process")
	}
	dir := t.TempDir()
	for round := range 3 {
		cmd := helperCmd(t, "write", dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		var lastAck uint64
		var lastETag string
		deadline := time.Now().Add(10 * time.Second)
		for acks := 0; acks < 5+7*round && time.Now().Before(deadline); acks++ {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("writer: %v (last line %q)", err, line)
			}
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "ACK" {
				t.Fatalf("writer said %q", line)
			}
			lastAck, _ = strconv.ParseUint(f[1], 10, 64)
			lastETag = f[2]
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		s, err := localstore.Open(dir)
		if err != nil {
			t.Fatalf("Open after the writer was killed: %v", err)
		}
		ctx := t.Context()
		b, a, err := s.Get(ctx, "crash/m", blob.GetOptions{})
		if err != nil {
			t.Fatalf("Get after crash: %v", err)
		}
		v := checkCrashContent(t, "crash/m", b)
		if v < lastAck || (v == lastAck && string(a.ETag) != lastETag) {
			t.Fatalf("after crash crash/m is version %d (%s); version %d (%s) was acknowledged", v, a.ETag, lastAck, lastETag)
		}
		tmp, err := os.ReadDir(filepath.Join(dir, "tmp"))
		if err != nil || len(tmp) != 0 {
			t.Fatalf("tmp/ after Open holds %v (%v)", tmp, err)
		}
		for tok := ""; ; {
			p, err := s.List(ctx, blob.ListOptions{Prefix: "crash/g/", Token: tok, Max: 7})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			for _, it := range p.Items {
				b, _, err := s.Get(ctx, it.Name, blob.GetOptions{})
				if err != nil {
					t.Fatalf("Get(%q): %v", it.Name, err)
				}
				checkCrashContent(t, it.Name, b)
			}
			if tok = p.Next; tok == "" {
				break
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: killed after %d acknowledged writes; blob at version %d", round, lastAck, v)
	}
}
