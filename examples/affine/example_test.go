package affine_test

import (
	"context"
	"log"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rolloutd/rolloutd/examples/affine"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// A client inside the cluster (its pod labelled rolloutd.io/client: "true",
// which the NetworkPolicy requires) appends to a shard and reads the record
// back; both calls reach the pod that holds the shard's writer.
func ExampleNewClient() {
	cc, err := affine.NewClient(affine.DefaultTarget,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := rolloutv1.NewRolloutServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Choose record ids yourself, or set request_id, so that retries (by the
	// channel's retry policy, or your own) are idempotent. NewClient's
	// interceptor sets a request_id for the channel's retries when you
	// don't.
	_, err = client.Append(ctx, &rolloutv1.AppendRequest{
		Shard: "exp-42/actor-7",
		Records: []*rolloutv1.Record{
			{Id: "rollout-9:turn-0001", RolloutId: "rollout-9", Role: rolloutv1.Role_ROLE_USER, Content: "2+2?"},
			{Id: "rollout-9:turn-0002", RolloutId: "rollout-9", Role: rolloutv1.Role_ROLE_ASSISTANT, Content: "4"},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	got, err := client.Get(ctx, &rolloutv1.GetRequest{Shard: "exp-42/actor-7", Id: "rollout-9:turn-0002"})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("seq %d: %s", got.GetRecord().GetSeq(), got.GetRecord().GetContent())
}
