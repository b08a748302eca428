package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// A client inside the cluster (its pod labelled rolloutd.io/client: "true",
// which the NetworkPolicy requires) dials every pod of the headless Service
// with affinity and mTLS, appends a rollout's turns, and reads one back;
// both calls reach the pod that holds the shard's writer.
func ExampleNew() {
	c, err := client.New(client.DefaultTarget,
		client.WithAffinity(true),
		client.WithTLS(client.TLSConfig{CAFile: "/certs/ca.crt", CertFile: "/certs/tls.crt", KeyFile: "/certs/tls.key"}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results, err := c.Append(ctx, "exp-42/actor-7", []*rolloutv1.Record{
		{Id: "rollout-9:turn-0001", RolloutId: "rollout-9", Role: rolloutv1.Role_ROLE_USER, Content: "2+2?"},
		{Id: "rollout-9:turn-0002", RolloutId: "rollout-9", Role: rolloutv1.Role_ROLE_ASSISTANT, Content: "4"},
	})
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		// The retry budget ran out with the outcome unknown: resend the
		// same records (here with the same ids) later to learn it.
		log.Fatal(err)
	case err != nil:
		log.Fatal(err)
	}
	rec, err := c.Get(ctx, "exp-42/actor-7", results[1].GetId())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.GetSeq(), rec.GetContent())
}

// A trainer follows a shard from its checkpoint, and checkpoints the
// cursor as it goes; a server restart in between is resumed from, unseen.
func ExampleClient_Scan() {
	c, err := client.New("localhost:50051")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var checkpoint uint64 // loaded from the trainer's last checkpoint
	var cur client.Cursor
	for rec, err := range c.Scan(context.Background(), "exp-42/actor-7",
		client.AfterSeq(checkpoint), client.Follow(), client.Role(rolloutv1.Role_ROLE_GRADE), client.WithCursor(&cur)) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(rec.GetRolloutId(), rec.GetReward())
		checkpoint = cur.Seq() // save it somewhere durable
	}
}

// A trainer rank consumes every actor of an experiment, shards created
// later included, and commits its positions as a consumer named
// "trainer" after processing each batch; restarted, it would continue
// after them. (The example runs against a rolloutd in this process.)
func ExampleClient_Subscribe() {
	addr, stop := exampleServer()
	defer stop()
	c, err := client.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, actor := range []string{"exp-42/actor-1", "exp-42/actor-2"} {
		if _, err := c.Append(ctx, actor, []*rolloutv1.Record{{Content: "turn 1"}, {Content: "turn 2"}}); err != nil {
			log.Fatal(err)
		}
	}

	// Rank 0 of 1: with n ranks, each passes its own Member and Members n.
	sub, err := c.Subscribe(ctx, "exp-42", client.SubscribeOptions{Consumer: "trainer", Member: 0, Members: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	n := 0
	for b, err := range sub.Batches() {
		if err != nil {
			log.Fatal(err) // errors.Is(err, client.ErrConsumerReset): subscribe again
		}
		for _, rec := range b.Records {
			fmt.Println(b.Shard, rec.GetSeq(), rec.GetContent()) // train on it
		}
		// Processed: store the cursors (cheap; once a second is plenty).
		if err := sub.Commit(ctx); err != nil {
			log.Fatal(err)
		}
		if n += len(b.Records); n == 4 {
			break
		}
	}
	info, err := c.DescribeConsumer(ctx, "exp-42", "trainer", true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed:", info.GetPositions())
	// Unordered output:
	// exp-42/actor-1 1 turn 1
	// exp-42/actor-1 2 turn 2
	// exp-42/actor-2 1 turn 1
	// exp-42/actor-2 2 turn 2
	// committed: map[exp-42/actor-1:2 exp-42/actor-2:2]
}
