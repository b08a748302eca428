package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// TestStoreFullOnATmpfs fills a real 16 MiB tmpfs under the binary's
// embedded store: the first Append that fails is answered
// RESOURCE_EXHAUSTED with reason STORE_FULL within a second; reads go on;
// once a file beside the store is removed, appends succeed again with no
// restart, and every acknowledged record reads back. Mounting needs root
// (CAP_SYS_ADMIN): elsewhere it skips, and internal/server's
// TestStoreFullIsSaidAtOnce covers the same with ENOSPC injected.
func TestStoreFullOnATmpfs(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v); TestStoreFullIsSaidAtOnce in internal/server covers a full store with injected ENOSPC", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, nil, "--store", filepath.Join(dir, "data"))
	content := strings.Repeat("x", 64<<10)
	appendOne := func(id string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := p.Client.Append(ctx, &rolloutv1.AppendRequest{Shard: "tmpfs/s", Records: []*rolloutv1.Record{{Id: id, RolloutId: "r1", Content: content}}})
		return time.Since(start), err
	}
	var acked []string
	var firstErr error
	var took time.Duration
	for i := 0; firstErr == nil; i++ {
		if i == 1000 {
			t.Fatal("1000 appends of 64 KiB fitted a 16 MiB tmpfs")
		}
		id := fmt.Sprintf("r%d", i)
		if took, firstErr = appendOne(id); firstErr == nil {
			acked = append(acked, id)
		}
	}
	st := status.Convert(firstErr)
	reason := ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason = info.GetReason()
		}
	}
	t.Logf("%d appends of 64 KiB acknowledged; the first failure, after %v: %v (reason %s)", len(acked), took, firstErr, reason)
	if st.Code() != codes.ResourceExhausted || reason != "STORE_FULL" || took > time.Second {
		t.Fatalf("first failed append: %v, reason %q, after %v; want RESOURCE_EXHAUSTED STORE_FULL within 1 s", firstErr, reason, took)
	}
	if _, err := p.Client.Get(context.Background(), &rolloutv1.GetRequest{Shard: "tmpfs/s", Id: acked[0]}); err != nil {
		t.Fatalf("Get while full: %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for i := 0; ; i++ {
		id := fmt.Sprintf("after-%d", i)
		_, err := appendOne(id)
		if err == nil {
			acked = append(acked, id)
			break
		}
		if time.Since(freed) > 10*time.Second {
			t.Fatalf("appends still fail 10 s after space was freed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("appends succeeded again %v after space was freed, with no restart", time.Since(freed))
	for _, id := range acked {
		if _, err := p.Client.Get(context.Background(), &rolloutv1.GetRequest{Shard: "tmpfs/s", Id: id}); err != nil {
			t.Errorf("Get(%s) of an acknowledged record: %v", id, err)
		}
	}
	if n := p.Metric("rolloutd_rpc_error_reasons_total", `reason="STORE_FULL"`); n < 1 {
		t.Errorf("rolloutd_rpc_error_reasons_total{reason=STORE_FULL} = %v", n)
	}
}
