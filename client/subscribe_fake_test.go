package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// The tests here play the server's part from a script, for what a real
// server does not do on demand: send again what a resumed stream asked to
// skip, or answer a resume at another consumer generation. What the real
// server does is tested in subscribe_test.go.

// scriptedStream is one Subscribe stream of subscribeFake: its messages,
// then its end (nil: it stays open until the client cancels it).
type scriptedStream struct {
	msgs []*rolloutv1.SubscribeResponse
	end  error
}

// subscribeFake answers Subscribe with its streams in turn, and
// CommitConsumer with commitGen or commitErr; it records the requests.
type subscribeFake struct {
	rolloutv1.UnimplementedRolloutServiceServer

	mu        sync.Mutex
	streams   []scriptedStream
	requests  []*rolloutv1.SubscribeRequest
	commits   []*rolloutv1.CommitConsumerRequest
	commitGen uint64
	commitErr error
}

func (f *subscribeFake) Subscribe(req *rolloutv1.SubscribeRequest, stream grpc.ServerStreamingServer[rolloutv1.SubscribeResponse]) error {
	f.mu.Lock()
	f.requests = append(f.requests, proto.Clone(req).(*rolloutv1.SubscribeRequest))
	if len(f.streams) == 0 {
		f.mu.Unlock()
		return status.Error(codes.FailedPrecondition, "no more streams scripted")
	}
	s := f.streams[0]
	f.streams = f.streams[1:]
	f.mu.Unlock()
	for _, m := range s.msgs {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	if s.end == nil {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return s.end
}

func (f *subscribeFake) CommitConsumer(_ context.Context, req *rolloutv1.CommitConsumerRequest) (*rolloutv1.CommitConsumerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits = append(f.commits, proto.Clone(req).(*rolloutv1.CommitConsumerRequest))
	if f.commitErr != nil {
		return nil, f.commitErr
	}
	return &rolloutv1.CommitConsumerResponse{Generation: f.commitGen}, nil
}

func started(gen uint64) *rolloutv1.SubscribeResponse {
	return &rolloutv1.SubscribeResponse{Started: &rolloutv1.SubscribeStarted{ConsumerGeneration: gen}}
}

func batch(shard string, cursor uint64, seqs ...uint64) *rolloutv1.SubscribeResponse {
	m := &rolloutv1.SubscribeResponse{Shard: shard, Cursor: cursor}
	for _, s := range seqs {
		m.Records = append(m.Records, &rolloutv1.Record{Id: fmt.Sprint("r", s), Seq: s})
	}
	return m
}

// withReason is a status with an ErrorInfo of rolloutd's domain.
func withReason(t *testing.T, code codes.Code, reason string) error {
	t.Helper()
	st, err := status.New(code, reason).WithDetails(&errdetails.ErrorInfo{Domain: client.ErrorDomain, Reason: reason})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// fastRetries keeps the fake tests' resumes quick.
var fastRetries = client.WithRetry(client.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})

// collectBatches reads sub until it has n batches or it ends; it returns
// "shard:seq" of every record, the batches, and the error it ended with.
func collectBatches(t *testing.T, sub *client.Subscription, n int) ([]string, []*client.SubscribeBatch, error) {
	t.Helper()
	var recs []string
	var batches []*client.SubscribeBatch
	if n == 0 {
		return nil, nil, nil
	}
	for b, err := range sub.Batches() {
		if err != nil {
			return recs, batches, err
		}
		batches = append(batches, b)
		for _, r := range b.Records {
			recs = append(recs, fmt.Sprintf("%s:%d", b.Shard, r.GetSeq()))
		}
		if len(batches) == n {
			break
		}
	}
	return recs, batches, nil
}

// A stream broken by a server shutting down (SCAN_INTERRUPTED) is resumed
// from the cursors received, those of batches not yet yielded included;
// what the resumed stream sends again is not yielded twice, and a shard
// whose cursor did not move yields nothing.
func TestSubscribeResumesFromTheReceivedCursors(t *testing.T) {
	f := &subscribeFake{streams: []scriptedStream{
		{msgs: []*rolloutv1.SubscribeResponse{started(0), batch("p/a", 3, 1, 2, 3), batch("p/b", 2, 1, 2)},
			end: withReason(t, codes.Unavailable, client.ReasonScanInterrupted)},
		{msgs: []*rolloutv1.SubscribeResponse{started(0), batch("p/a", 5, 2, 3, 4, 5), batch("p/b", 2), batch("p/b", 3, 3)}},
	}}
	c := newClient(t, startFake(t, f), fastRetries)
	ctx := ctxFor(t, 20*time.Second)
	sub, err := c.Subscribe(ctx, "p", client.SubscribeOptions{Start: client.StartEarliest, Positions: map[string]uint64{"p/z": 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// Nothing is read until both streams have been served: the first
	// stream's batches wait in the subscription's buffer while it resumes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.requests)
		f.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Subscribe requests, want the resume's too", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	recs, _, err := collectBatches(t, sub, 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[p/a:1 p/a:2 p/a:3 p/b:1 p/b:2 p/a:4 p/a:5 p/b:3]"; fmt.Sprint(recs) != want {
		t.Errorf("yielded %v, want %s: each record once", recs, want)
	}
	f.mu.Lock()
	resumed := f.requests[1]
	f.mu.Unlock()
	if got := fmt.Sprint(resumed.GetPositions()); got != "map[p/a:3 p/b:2 p/z:7]" || resumed.GetStart() != rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST {
		t.Errorf("resumed with positions %s, start %v; want map[p/a:3 p/b:2 p/z:7], EARLIEST", got, resumed.GetStart())
	}
	if got := fmt.Sprint(sub.Positions()); got != "map[p/a:5 p/b:3 p/z:7]" {
		t.Errorf("Positions %s, want map[p/a:5 p/b:3 p/z:7]", got)
	}
}

// A resumed stream that reads the consumer at another generation (it was
// reset while the subscription was disconnected) ends the subscription
// with ErrConsumerReset, after the batches received before the break.
func TestSubscribeEndsWhenAResumeFindsTheConsumerReset(t *testing.T) {
	f := &subscribeFake{streams: []scriptedStream{
		{msgs: []*rolloutv1.SubscribeResponse{started(4), batch("p/a", 2, 1, 2)}, end: status.Error(codes.Unavailable, "connection reset")},
		{msgs: []*rolloutv1.SubscribeResponse{started(5), batch("p/a", 1, 1)}},
	}}
	c := newClient(t, startFake(t, f), fastRetries)
	sub, err := c.Subscribe(ctxFor(t, 20*time.Second), "p", client.SubscribeOptions{Consumer: "trainer"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	recs, _, err := collectBatches(t, sub, 10)
	if !errors.Is(err, client.ErrConsumerReset) || fmt.Sprint(recs) != "[p/a:1 p/a:2]" {
		t.Fatalf("yielded %v, then %v; want [p/a:1 p/a:2], then ErrConsumerReset", recs, err)
	}
	if g := sub.ConsumerGeneration(); g != 4 {
		t.Errorf("ConsumerGeneration %d, want 4, the one the subscription read", g)
	}
	// The error is yielded once.
	for b, err := range sub.Batches() {
		t.Errorf("after the end, Batches yielded %v, %v", b, err)
	}
}

// Commit sends the cursors of the batches yielded (not of those only
// received), only those that moved since the last Commit, with the
// subscription's consumer generation; without a change it sends nothing.
// A refusal as CONSUMER_RESET ends the subscription.
func TestCommitSendsTheYieldedCursorsThatMoved(t *testing.T) {
	f := &subscribeFake{commitGen: 4, streams: []scriptedStream{
		{msgs: []*rolloutv1.SubscribeResponse{started(4), batch("p/a", 2, 1, 2), batch("p/b", 1, 1), batch("p/a", 3, 3)}},
	}}
	c := newClient(t, startFake(t, f), fastRetries)
	ctx := ctxFor(t, 20*time.Second)
	sub, err := c.Subscribe(ctx, "p", client.SubscribeOptions{Consumer: "trainer"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	commits := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for _, c := range f.commits {
			out = append(out, fmt.Sprintf("%s/%s %v gen %d", c.GetPrefix(), c.GetConsumer(), c.GetPositions(), c.GetGeneration()))
		}
		return out
	}
	if _, _, err := collectBatches(t, sub, 2); err != nil {
		t.Fatal(err)
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := collectBatches(t, sub, 1); err != nil {
		t.Fatal(err)
	}
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(commits()), "[p/trainer map[p/a:2 p/b:1] gen 4 p/trainer map[p/a:3] gen 4]"; got != want {
		t.Errorf("commits %s, want %s", got, want)
	}
	// Reset meanwhile: the commit is refused, and the subscription ends.
	f.mu.Lock()
	f.commitErr = withReason(t, codes.FailedPrecondition, client.ReasonConsumerReset)
	f.streams = []scriptedStream{{msgs: []*rolloutv1.SubscribeResponse{started(4), batch("p/a", 4, 4)}}}
	f.mu.Unlock()
	sub3, err := c.Subscribe(ctx, "p", client.SubscribeOptions{Consumer: "trainer", Positions: map[string]uint64{"p/a": 3}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub3.Close()
	if _, _, err := collectBatches(t, sub3, 1); err != nil {
		t.Fatal(err)
	}
	if err := sub3.Commit(ctx); !errors.Is(err, client.ErrConsumerReset) {
		t.Fatalf("Commit after a reset: %v, want ErrConsumerReset", err)
	}
	_, _, err = collectBatches(t, sub3, 10)
	if !errors.Is(err, client.ErrConsumerReset) {
		t.Errorf("after a Commit refused as reset, Batches ended with %v, want ErrConsumerReset", err)
	}
}
