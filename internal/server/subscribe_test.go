package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/testutil/testpki"
)

// subscribeConfig lists prefixes and parks idle readers fast.
func subscribeConfig() Config {
	return Config{Store: memstore.New(), SubscribeWatchInterval: 20 * time.Millisecond, SubscribeIdleAfter: 200 * time.Millisecond}
}

// subscriber is one Subscribe stream and what it received.
type subscriber struct {
	mu      sync.Mutex
	msgs    []*rolloutv1.SubscribeResponse
	records map[string][]*rolloutv1.Record
	cursors map[string]uint64
	moved   chan struct{}
	ended   chan error // the stream's end, once
	cancel  context.CancelFunc
}

func startSubscriber(t *testing.T, c rolloutv1.RolloutServiceClient, req *rolloutv1.SubscribeRequest) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.Subscribe(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{records: map[string][]*rolloutv1.Record{}, cursors: map[string]uint64{}, moved: make(chan struct{}, 1), ended: make(chan error, 1), cancel: cancel}
	go s.recv(stream)
	return s
}

func (s *subscriber) recv(stream grpc.ServerStreamingClient[rolloutv1.SubscribeResponse]) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			s.ended <- err
			return
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, resp)
		if resp.GetStarted() == nil && !resp.GetShardDeleted() {
			s.records[resp.GetShard()] = append(s.records[resp.GetShard()], resp.GetRecords()...)
			s.cursors[resp.GetShard()] = resp.GetCursor()
		}
		s.mu.Unlock()
		select {
		case s.moved <- struct{}{}:
		default:
		}
	}
}

// reached waits until shard's cursor reaches seq.
func (s *subscriber) reached(t *testing.T, shard string, seq uint64) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		s.mu.Lock()
		c := s.cursors[shard]
		s.mu.Unlock()
		if c >= seq {
			return
		}
		select {
		case <-s.moved:
		case err := <-s.ended:
			t.Fatalf("the subscription ended with %v before %s reached %d", err, shard, seq)
		case <-deadline:
			t.Fatalf("the subscription never reached %s seq %d (at %d)", shard, seq, c)
		}
	}
}

// end waits for the stream's end.
func (s *subscriber) end(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.ended:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the subscription did not end")
		return nil
	}
}

func appendTo(t *testing.T, c rolloutv1.RolloutServiceClient, shard string, recs ...*rolloutv1.Record) uint64 {
	t.Helper()
	resp, err := c.Append(context.Background(), &rolloutv1.AppendRequest{Shard: shard, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetResults()[len(resp.GetResults())-1].GetSeq()
}

// Subscribe delivers, after its started message, the records of every
// shard under the prefix, the new ones too, each shard in seq order with
// its name and cursor; whole records as stored, or filtered and
// projected as a Scan's.
func TestSubscribeDeliversThePrefix(t *testing.T) {
	ts := startServer(t, subscribeConfig())
	c := ts.client
	appendTo(t, c, "exp/a", record("a1"), record("a2"))
	appendTo(t, c, "expo", record("x"))
	whole := startSubscriber(t, c, &rolloutv1.SubscribeRequest{Prefix: "exp"})
	second := &rolloutv1.Record{Id: "b2", RolloutId: "keep", Content: "body"}
	filtered := startSubscriber(t, c, &rolloutv1.SubscribeRequest{Prefix: "exp/", RolloutId: "keep", Fields: &fieldmaskpb.FieldMask{Paths: []string{"rollout_id"}}})
	a := appendTo(t, c, "exp/a", record("a3"))
	b := appendTo(t, c, "exp/b", record("b1"), second)
	for _, s := range []*subscriber{whole, filtered} {
		s.reached(t, "exp/a", a)
		s.reached(t, "exp/b", b)
		s.cancel()
		s.end(t)
	}
	if len(whole.msgs) == 0 || whole.msgs[0].GetStarted() == nil {
		t.Fatalf("the first message is %v, want started", whole.msgs[0])
	}
	for _, m := range whole.msgs[1:] {
		if m.GetStarted() != nil {
			t.Fatal("a second started message")
		}
		if m.GetShard() == "expo" {
			t.Fatal("delivered shard expo, not under prefix exp")
		}
	}
	ids := func(rs []*rolloutv1.Record) string {
		var out []string
		for i, r := range rs {
			if r.GetSeq() != rs[0].GetSeq()+uint64(i) {
				t.Fatalf("seqs out of order: %v", rs)
			}
			out = append(out, r.GetId())
		}
		return strings.Join(out, ",")
	}
	if got := ids(whole.records["exp/a"]) + "|" + ids(whole.records["exp/b"]); got != "a1,a2,a3|b1,b2" {
		t.Errorf("delivered %s", got)
	}
	if got := filtered.records["exp/b"]; len(got) != 1 || got[0].GetId() != "b2" || got[0].GetContent() != "" || got[0].GetRolloutId() != "keep" {
		t.Errorf("filtered and projected: %v", got)
	}
	if len(filtered.records["exp/a"]) != 0 || filtered.cursors["exp/a"] != a {
		t.Errorf("filtered out shard exp/a: records %v, cursor %d (want none, %d)", filtered.records["exp/a"], filtered.cursors["exp/a"], a)
	}
}

// Bad requests are INVALID_ARGUMENT; a missing consumer with
// START_CONSUMER is NOT_FOUND. Nothing is started for them.
func TestSubscribeRejects(t *testing.T) {
	cfg := subscribeConfig()
	cfg.ConsumerPositions = func(_ context.Context, prefix, name string) (map[string]uint64, uint64, bool, error) {
		return nil, 0, false, nil
	}
	ts := startServer(t, cfg)
	for _, c := range []struct {
		ts   *testServer
		req  *rolloutv1.SubscribeRequest
		code codes.Code
	}{
		{ts, &rolloutv1.SubscribeRequest{Prefix: "Bad"}, codes.InvalidArgument},
		{ts, &rolloutv1.SubscribeRequest{Prefix: "a", Member: 2, Members: 2}, codes.InvalidArgument},
		{ts, &rolloutv1.SubscribeRequest{Prefix: "a", Positions: map[string]uint64{"b": 1}}, codes.InvalidArgument},
		{ts, &rolloutv1.SubscribeRequest{Prefix: "a", Consumer: "-x"}, codes.InvalidArgument},
		{ts, &rolloutv1.SubscribeRequest{Prefix: "a", Start: 7}, codes.InvalidArgument},
		{ts, &rolloutv1.SubscribeRequest{Prefix: "a", Fields: &fieldmaskpb.FieldMask{Paths: []string{"nope"}}}, codes.InvalidArgument},
		{ts, &rolloutv1.SubscribeRequest{Prefix: "a", Consumer: "trainer", Start: rolloutv1.SubscribeStart_SUBSCRIBE_START_CONSUMER}, codes.NotFound},
	} {
		s := startSubscriber(t, c.ts.client, c.req)
		if err := s.end(t); status.Code(err) != c.code {
			t.Errorf("%v: %v, want %v", c.req, err, c.code)
		}
		if len(s.msgs) != 0 {
			t.Errorf("%v: sent %v", c.req, s.msgs)
		}
	}
	if n := ts.subscribe.Subscriptions(); n != 0 {
		t.Errorf("%d subscriptions run", n)
	}
}

// A consumer's positions start the subscription, and its generation is in
// the started message.
func TestSubscribeFromConsumer(t *testing.T) {
	cfg := subscribeConfig()
	cfg.ConsumerPositions = func(_ context.Context, prefix, name string) (map[string]uint64, uint64, bool, error) {
		if prefix != "c" || name != "trainer" {
			return nil, 0, false, fmt.Errorf("asked for %s %s", prefix, name)
		}
		return map[string]uint64{"c/x": 2}, 4, true, nil
	}
	ts := startServer(t, cfg)
	tail := appendTo(t, ts.client, "c/x", record("1"), record("2"), record("3"))
	s := startSubscriber(t, ts.client, &rolloutv1.SubscribeRequest{Prefix: "c", Consumer: "trainer"})
	s.reached(t, "c/x", tail)
	s.cancel()
	s.end(t)
	if g := s.msgs[0].GetStarted().GetConsumerGeneration(); g != 4 {
		t.Errorf("started with generation %d, want 4", g)
	}
	if got := s.records["c/x"]; len(got) != 1 || got[0].GetId() != "3" {
		t.Errorf("from the consumer's position 2: %v", got)
	}
}

// A consumer committed through CommitConsumer starts a subscription that
// names it, from its positions and with its generation.
func TestSubscribeFromCommittedConsumer(t *testing.T) {
	ts := startServer(t, subscribeConfig())
	c := ts.client
	tail := appendTo(t, c, "k/x", record("1"), record("2"), record("3"))
	if _, err := c.CommitConsumer(context.Background(), &rolloutv1.CommitConsumerRequest{Prefix: "k", Consumer: "trainer", Positions: map[string]uint64{"k/x": 1}}); err != nil {
		t.Fatal(err)
	}
	s := startSubscriber(t, c, &rolloutv1.SubscribeRequest{Prefix: "k", Consumer: "trainer", Start: rolloutv1.SubscribeStart_SUBSCRIBE_START_CONSUMER})
	s.reached(t, "k/x", tail)
	s.cancel()
	s.end(t)
	if g := s.msgs[0].GetStarted().GetConsumerGeneration(); g != 1 {
		t.Errorf("started with generation %d, want 1", g)
	}
	if got := s.records["k/x"]; len(got) != 2 || got[0].GetId() != "2" {
		t.Errorf("from the committed position 1: %v", got)
	}
	// The lag is computed from the tails the subscription's readers know.
	info, err := c.DescribeConsumer(context.Background(), &rolloutv1.DescribeConsumerRequest{Prefix: "k", Consumer: "trainer"})
	if err != nil || info.GetLagRecords() != tail-1 {
		t.Errorf("DescribeConsumer: %v, %v; want lag %d", info, err, tail-1)
	}
}

// Shutdown ends a subscription with UNAVAILABLE, reason SCAN_INTERRUPTED,
// after what it delivered, and leaves no engine goroutine (goleak).
func TestSubscribeEndsAtShutdown(t *testing.T) {
	ts := startServer(t, subscribeConfig())
	tail := appendTo(t, ts.client, "s/a", record("1"))
	s := startSubscriber(t, ts.client, &rolloutv1.SubscribeRequest{Prefix: "s"})
	s.reached(t, "s/a", tail)
	ts.stop(t)
	err := s.end(t)
	if status.Code(err) != codes.Unavailable || reasonOf(status.Convert(err)) != rolloutv1.ErrorReason_SCAN_INTERRUPTED.String() {
		t.Fatalf("at shutdown the subscription ended with %v, want Unavailable SCAN_INTERRUPTED", err)
	}
	if n := ts.subscribe.Subscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after shutdown", n)
	}
}

// subscribePolicy lets the trainer scan team-a, the reader scan
// everything.
const subscribePolicy = `
grants:
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a, team-b]
    verbs: [append]
  - identities: ["spiffe://test/ns/team-a/sa/trainer"]
    shardPrefixes: [team-a]
    verbs: [scan]
  - identities: [reader.team-b.test]
    shardPrefixes: ["*"]
    verbs: [scan]
`

// Subscribe needs scan on its whole prefix: team-a's grant covers prefixes
// team-a and team-a/run1, not the empty prefix, team-ab or team-b; only
// "*" covers the empty prefix. A reload that revokes the grant ends an
// open subscription with PERMISSION_DENIED, as it ends a following Scan.
func TestSubscribeAuthorization(t *testing.T) {
	as := startAuthzConfig(t, subscribePolicy, Config{SubscribeWatchInterval: 20 * time.Millisecond})
	trainer, reader := as.clients[idTrainer], as.clients[idReader]
	tail := appendTo(t, trainer, "team-a/run1", record("a1"))
	for prefix, ok := range map[string]bool{"team-a": true, "team-a/run1": true, "": false, "team-ab": false, "team-b": false} {
		s := startSubscriber(t, trainer, &rolloutv1.SubscribeRequest{Prefix: prefix})
		if ok {
			s.reached(t, "team-a/run1", tail)
			s.cancel()
			s.end(t)
			continue
		}
		// Refused as the call begins, not revoked once registered.
		if err := s.end(t); status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "may not scan") {
			t.Errorf("the trainer's subscription to %q: %v, want PermissionDenied saying it may not scan", prefix, err)
		}
	}
	all := startSubscriber(t, reader, &rolloutv1.SubscribeRequest{})
	all.reached(t, "team-a/run1", tail)
	open := startSubscriber(t, trainer, &rolloutv1.SubscribeRequest{Prefix: "team-a"})
	open.reached(t, "team-a/run1", tail)

	noScan := strings.Replace(subscribePolicy, "    shardPrefixes: [team-a]\n    verbs: [scan]\n", "    shardPrefixes: [team-a/other]\n    verbs: [scan]\n", 1)
	testpki.WriteFile(t, as.policyFile, []byte(noScan))
	if changed, err := as.az.Check(); !changed || err != nil {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if err := open.end(t); status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "revoked") {
		t.Fatalf("the revoked subscription ended with %v, want PermissionDenied (revoked)", err)
	}
	// The reader's is still allowed, and delivers.
	next := appendTo(t, trainer, "team-a/run1", record("a2"))
	all.reached(t, "team-a/run1", next)
	all.cancel()
	all.end(t)
}
