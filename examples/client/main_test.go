package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example runs against a real server, twice: the second run appends
// the same ids and finds them already present.
func TestClient(t *testing.T) {
	srv, err := server.New(server.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	}()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rolloutv1.NewRolloutServiceClient(conn)
	ctx := context.Background()

	var out strings.Builder
	if err := run(ctx, c, "demo/run1", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"appended rollout-42:0: seq 1", "appended rollout-42:1: seq 2", `"graderId":"exact-match"`, `"reward":1`} {
		if !strings.Contains(strings.ReplaceAll(out.String(), " ", ""), strings.ReplaceAll(want, " ", "")) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(ctx, c, "demo/run1", &out); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "already present true") != 2 || !strings.Contains(out.String(), "appended rollout-42:0: seq 1,") {
		t.Errorf("second run:\n%s", out.String())
	}
}
