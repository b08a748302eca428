package main

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts a real server on loopback, with opts added, and returns a
// client of it.
func serve(t *testing.T, store *memstore.Store, opts ...grpc.ServerOption) *client.Client {
	t.Helper()
	srv, err := server.New(server.Config{Store: store, ServerOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	c, err := client.New(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return c
}

func recordCount(t *testing.T, store *memstore.Store, shardName string) uint64 {
	t.Helper()
	m, err := shard.NewReader(store, shard.ReaderOptions{}).Manifest(context.Background(), shardName)
	if err != nil {
		t.Fatal(err)
	}
	return m.GetRecordCount()
}

// The example runs against a real server, twice with one request_id: the
// second run gets the same ids back, already present, the grade record
// (sent without an id) included, and the shard holds two records.
func TestClient(t *testing.T) {
	store := memstore.New()
	c := serve(t, store)
	ctx := context.Background()
	const reqID = "3f0c8a52-6c1e-4d7b-8a34-0e1b2c3d4e5f"
	grade := shard.DeriveID("demo/run1", reqID, 1)

	var out strings.Builder
	if err := run(ctx, c, "demo/run1", reqID, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"appended rollout-42:0: seq 1", "appended " + grade + ": seq 2", `"graderId":"exact-match"`, `"reward":1`} {
		if !strings.Contains(strings.ReplaceAll(out.String(), " ", ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(ctx, c, "demo/run1", reqID, &out); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "already present true") != 2 || !strings.Contains(out.String(), "appended "+grade+": seq 2,") {
		t.Errorf("second run:\n%s", out.String())
	}
	if n := recordCount(t, store, "demo/run1"); n != 2 {
		t.Errorf("shard holds %d records after two runs with one request_id, want 2", n)
	}
}

// An Append that was committed but whose answer was lost (OUTCOME_UNKNOWN,
// as after a cancelled commit) is sent again, and the resend finds both
// records, the id-less grade included, already present: nothing is stored
// twice.
func TestClientRetryAfterLostAnswer(t *testing.T) {
	store := memstore.New()
	var appends atomic.Int64
	loseFirst := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if info.FullMethod == rolloutv1.RolloutService_Append_FullMethodName && appends.Add(1) == 1 && err == nil {
			st, _ := status.New(codes.Unavailable, "answer lost after commit").WithDetails(&errdetails.ErrorInfo{Domain: server.ErrorDomain, Reason: rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String()})
			return nil, st.Err()
		}
		return resp, err
	}
	c := serve(t, store, grpc.ChainUnaryInterceptor(loseFirst))
	var out strings.Builder
	if err := run(context.Background(), c, "demo/run1", "1b7e0f5a-2c3d-4e5f-8a9b-0c1d2e3f4a5b", &out); err != nil {
		t.Fatal(err)
	}
	if n := appends.Load(); n != 2 {
		t.Errorf("the server saw %d Appends, want 2 (one lost answer, one resend)", n)
	}
	if strings.Count(out.String(), "already present true") != 2 {
		t.Errorf("the resend should find both records already present:\n%s", out.String())
	}
	if n := recordCount(t, store, "demo/run1"); n != 2 {
		t.Errorf("shard holds %d records, want 2", n)
	}
}
