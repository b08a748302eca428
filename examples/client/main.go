// Command client is a small rolloutd client: it appends two records to a
// shard and reads one back, through the Go client package
// github.com/rolloutd/rolloutd/client.
//
//	go run ./cmd/rolloutd &                       # a server on :50051
//	go run ./examples/client --addr localhost:50051 --shard demo/run1
//
// Every Append carries a request_id (a fresh UUID unless --request-id names
// one), and the client package sends exactly the same request again when
// the error's ErrorInfo reason says a resend helps, never deciding from the
// message text. That is safe even though the grade record has no id of its
// own: the server derives its id from the shard, the request_id and the
// record's index, so a resend of a request that was committed after all
// comes back with the same ids, already_present, and stores nothing twice.
// Running the client twice with the same --request-id shows it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

func main() {
	addr := flag.String("addr", "localhost:50051", "rolloutd gRPC address")
	shardName := flag.String("shard", "demo/run1", "shard to append to")
	requestID := flag.String("request-id", "", "the Append's request_id; empty means a fresh UUID")
	flag.Parse()
	if *requestID == "" {
		*requestID = uuid.NewString()
	}

	c, err := client.New(*addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx, c, *shardName, *requestID, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
}

// run appends two records of one rollout to shardName under requestID, an
// assistant turn with the caller's id and a grade without one, then gets
// the grade back by the id the server acknowledged.
func run(ctx context.Context, c *client.Client, shardName, requestID string, out io.Writer) error {
	reward := float32(1)
	results, err := c.Append(ctx, shardName, []*rolloutv1.Record{
		{
			Id:            "rollout-42:0",
			RolloutId:     "rollout-42",
			SequenceOrder: 0,
			Role:          rolloutv1.Role_ROLE_ASSISTANT,
			Content:       "The answer is 4.",
			OutputTokens:  []int32{791, 4320, 374, 220, 19},
			LossMask:      []byte{1, 1, 1, 1, 1},
		},
		{
			// No id: the server derives one from the request_id.
			RolloutId:     "rollout-42",
			SequenceOrder: 1,
			Role:          rolloutv1.Role_ROLE_GRADE,
			Reward:        &reward,
			GraderId:      "exact-match",
		},
	}, client.WithRequestID(requestID))
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	for _, r := range results {
		fmt.Fprintf(out, "appended %s: seq %d, epoch %d, generation %d, already present %v\n",
			r.GetId(), r.GetSeq(), r.GetEpoch(), r.GetGeneration(), r.GetAlreadyPresent())
	}

	got, err := c.Get(ctx, shardName, results[1].GetId())
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	fmt.Fprintf(out, "got %s\n", protojson.Format(got))
	return nil
}
