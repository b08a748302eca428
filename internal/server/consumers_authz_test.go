package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

const consumerPolicy = `
grants:
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [scan, consume]
  - identities: [reader.team-b.test]
    shardPrefixes: [team-b]
    verbs: [scan, consume]
  - identities: ["cn:cn-admin"]
    shardPrefixes: ["*"]
    verbs: [consume]
`

// Committing, resetting and deleting a consumer need consume on its whole
// prefix, describing and listing need scan: team-a cannot reset team-b's
// consumer, nor the consumer of every shard, and lists only its own.
func TestConsumerAuthorization(t *testing.T) {
	as := startAuthz(t, consumerPolicy)
	trainer, reader, admin, other := as.clients[idTrainer], as.clients[idReader], as.clients[idAdmin], as.clients[idOther]
	ctx := rpcCtx(t)
	for _, k := range []struct {
		c      rolloutv1.RolloutServiceClient
		prefix string
	}{{trainer, "team-a"}, {trainer, "team-a/exp"}, {reader, "team-b"}, {admin, ""}} {
		if _, err := k.c.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: k.prefix, Consumer: "t"}); err != nil {
			t.Fatalf("commit of %q's consumer by its owner: %v", k.prefix, err)
		}
	}
	denied := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", what, err)
		}
	}
	_, err := trainer.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "team-b", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST})
	denied("team-a resets team-b's consumer", err)
	_, err = trainer.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "team-b", Consumer: "t"})
	denied("team-a commits to team-b's consumer", err)
	_, err = trainer.DeleteConsumer(ctx, &rolloutv1.DeleteConsumerRequest{Prefix: "team-b", Consumer: "t"})
	denied("team-a deletes team-b's consumer", err)
	_, err = trainer.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "", Consumer: "t", To: rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST})
	denied("team-a resets the consumer of every shard", err)
	_, err = trainer.CommitConsumer(ctx, &rolloutv1.CommitConsumerRequest{Prefix: "team-ab", Consumer: "t"})
	denied("team-a commits to team-ab's consumer", err)
	_, err = trainer.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "team-b", Consumer: "t"})
	denied("team-a describes team-b's consumer", err)
	_, err = admin.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "", Consumer: "t"})
	denied("consume without scan describes", err)
	_, err = other.ListConsumers(ctx, &rolloutv1.ListConsumersRequest{})
	denied("a caller without scan lists", err)

	if _, err := trainer.DescribeConsumer(ctx, &rolloutv1.DescribeConsumerRequest{Prefix: "team-a/exp", Consumer: "t"}); err != nil {
		t.Errorf("team-a describes its consumer: %v", err)
	}
	if _, err := reader.ResetConsumer(ctx, &rolloutv1.ResetConsumerRequest{Prefix: "team-b", Consumer: "t", Positions: map[string]uint64{"team-b/x": 3}}); err != nil {
		t.Errorf("team-b resets its consumer: %v", err)
	}
	lr, err := trainer.ListConsumers(ctx, &rolloutv1.ListConsumersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, c := range lr.GetConsumers() {
		listed = append(listed, c.GetPrefix()+":"+c.GetConsumer())
	}
	if len(listed) != 2 || listed[0] != "team-a:t" || listed[1] != "team-a/exp:t" {
		t.Errorf("team-a lists %v, want only its own two consumers", listed)
	}
}
