package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
)

// The consumer methods against the real binary: commits merge and never
// move a position backwards, a commit for a generation before a reset is
// ErrConsumerReset with the generation, and the consumer is listed,
// described and deleted.
func TestConsumers(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	if err := c.CommitConsumer(ctx, "exp", "t", map[string]uint64{"exp/a": 5}, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.CommitConsumer(ctx, "exp", "t", map[string]uint64{"exp/a": 3, "exp/b": 1}, 1); err != nil {
		t.Fatalf("CommitConsumer for generation 1: %v", err)
	}
	info, err := c.DescribeConsumer(ctx, "exp", "t", true)
	if err != nil || info.GetGeneration() != 1 || info.GetPositions()["exp/a"] != 5 || info.GetPositions()["exp/b"] != 1 {
		t.Fatalf("DescribeConsumer = %v, %v", info, err)
	}
	if _, err := c.ResetConsumer(ctx, "exp", "t", client.StartEarliest, nil); err != nil {
		t.Fatal(err)
	}
	err = c.CommitConsumer(ctx, "exp", "t", map[string]uint64{"exp/a": 9}, 1)
	var ce *client.Error
	if !errors.Is(err, client.ErrConsumerReset) || !errors.As(err, &ce) || ce.Metadata["generation"] != "2" {
		t.Fatalf("a commit for generation 1 after a reset: %v, want ErrConsumerReset at generation 2", err)
	}
	n := 0
	for ci, err := range c.AllConsumers(ctx, "") {
		if err != nil || ci.GetConsumer() != "t" {
			t.Fatalf("AllConsumers: %v, %v", ci, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("AllConsumers listed %d", n)
	}
	if err := c.DeleteConsumer(ctx, "exp", "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeConsumer(ctx, "exp", "t", false); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("DescribeConsumer after delete: %v, want ErrNotFound", err)
	}
}
