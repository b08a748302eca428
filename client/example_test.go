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
