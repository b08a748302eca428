package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// Two real rolloutd instances on one store (Azurite): with the Go client's
// affinity every shard's writer opens on one instance only, and nothing is
// fenced. When one instance dies, the client keeps working on the other.
// (It lives here, not in client, because it needs the real binary and
// Azurite, which this package already has.)
func TestClientAffinityOverTwoInstances(t *testing.T) {
	container := containerName("client-affinity", 1)
	a, b := startProc(t, "A", container), startProc(t, "B", container)
	r := manual.NewBuilderWithScheme("affinitytest")
	var st resolver.State
	for _, addr := range []string{a.GRPCAddr, b.GRPCAddr} {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}})
	}
	r.InitialState(st)
	c, err := client.New(r.Scheme()+":///rolloutd", client.WithAffinity(true), client.WithDialOptions(grpc.WithResolvers(r)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shards := make([]string, 24)
	for i := range shards {
		shards[i] = fmt.Sprintf("exp-%d/actor-%d", i%7, i)
	}
	for round := range 3 {
		for _, s := range shards {
			if _, err := c.Append(ctx, s, []*rolloutv1.Record{{Id: fmt.Sprint("r", round), Content: "x"}}); err != nil {
				t.Fatalf("Append(%s): %v", s, err)
			}
		}
	}
	opensA, opensB := a.Metric("rolloutd_writer_opens_total", ""), b.Metric("rolloutd_writer_opens_total", "")
	fences := a.Metric("rolloutd_writer_fences_total", "") + b.Metric("rolloutd_writer_fences_total", "")
	t.Logf("writer opens: A %v, B %v; fences %v", opensA, opensB, fences)
	if opensA+opensB != float64(len(shards)) || fences != 0 {
		t.Errorf("%d shards opened %v writers on A and %v on B, with %v fences; want one open per shard and no fence",
			len(shards), opensA, opensB, fences)
	}
	if opensA == 0 || opensB == 0 {
		t.Errorf("the shards did not spread: A opened %v writers, B %v", opensA, opensB)
	}

	a.Kill()
	for _, s := range shards {
		if _, err := c.Append(ctx, s, []*rolloutv1.Record{{Id: "after", Content: "x"}}); err != nil {
			t.Fatalf("Append(%s) after A died: %v", s, err)
		}
		if got, err := c.Get(ctx, s, "r0"); err != nil || got.GetSeq() != 1 {
			t.Fatalf("Get(%s) after A died: %v %v", s, got, err)
		}
	}
}
