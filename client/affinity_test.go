package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// fakeServer is a RolloutService that records which shards it served. It
// stores nothing; routing is all the fake-server tests look at.
type fakeServer struct {
	rolloutv1.UnimplementedRolloutServiceServer
	name string

	mu     sync.Mutex
	shards map[string]int      // shard -> requests served
	header map[string][]string // shard -> ShardHeader values seen
	reqIDs map[string][]string // shard -> request_id of every Append attempt
	// failFirst answers UNAVAILABLE, without details, to the first Append
	// attempt per shard.
	failFirst bool
	failed    map[string]bool
	// answers, when set, are the errors of the Append attempts, in turn.
	answers []error
}

func newFakeServer(name string) *fakeServer {
	return &fakeServer{name: name, shards: map[string]int{}, header: map[string][]string{},
		reqIDs: map[string][]string{}, failed: map[string]bool{}}
}

func (s *fakeServer) record(ctx context.Context, shard string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shards[shard]++
	s.header[shard] = append(s.header[shard], md.Get(client.ShardHeader)...)
}

func (s *fakeServer) Append(ctx context.Context, req *rolloutv1.AppendRequest) (*rolloutv1.AppendResponse, error) {
	s.record(ctx, req.GetShard())
	s.mu.Lock()
	s.reqIDs[req.GetShard()] = append(s.reqIDs[req.GetShard()], req.GetRequestId())
	fail := s.failFirst && !s.failed[req.GetShard()]
	s.failed[req.GetShard()] = true
	var answer error
	if len(s.answers) > 0 {
		answer, s.answers = s.answers[0], s.answers[1:]
	}
	s.mu.Unlock()
	if answer != nil {
		return nil, answer
	}
	if fail {
		return nil, status.Errorf(codes.Unavailable, "shard %q: connection reset", req.GetShard())
	}
	resp := &rolloutv1.AppendResponse{}
	for i, r := range req.GetRecords() {
		resp.Results = append(resp.Results, &rolloutv1.AppendResult{Id: r.GetId(), Seq: uint64(i + 1)})
	}
	return resp, nil
}

func (s *fakeServer) Get(ctx context.Context, req *rolloutv1.GetRequest) (*rolloutv1.GetResponse, error) {
	s.record(ctx, req.GetShard())
	return &rolloutv1.GetResponse{Record: &rolloutv1.Record{Id: req.GetId()}}, nil
}

func (s *fakeServer) Scan(req *rolloutv1.ScanRequest, stream grpc.ServerStreamingServer[rolloutv1.ScanResponse]) error {
	s.record(stream.Context(), req.GetShard())
	return stream.Send(&rolloutv1.ScanResponse{Records: []*rolloutv1.Record{{Id: "x", Seq: 1}}, Cursor: 1})
}

func (s *fakeServer) served() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.shards))
	for k, v := range s.shards {
		out[k] = v
	}
	return out
}

// startFake serves fake (a fakeServer, or another) on a loopback port until
// the test ends.
func startFake(t *testing.T, fake rolloutv1.RolloutServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rolloutv1.RegisterRolloutServiceServer(srv, fake)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// endpoints is what the DNS resolver reports for a headless Service: one
// endpoint per ready pod.
func endpoints(addrs ...string) resolver.State {
	var st resolver.State
	for _, a := range addrs {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	return st
}

// dialAffine connects with affinity through a manual resolver standing in
// for DNS. The resolver reports no service config, so the channel uses
// client.ServiceConfig, as it does with DNS.
func dialAffine(t *testing.T, st resolver.State, opts ...client.Option) (*client.Client, *manual.Resolver) {
	t.Helper()
	r := manual.NewBuilderWithScheme("affinitytest")
	r.InitialState(st)
	return newClient(t, r.Scheme()+":///rolloutd", append([]client.Option{client.WithAffinity(true), client.WithDialOptions(grpc.WithResolvers(r))}, opts...)...), r
}

func callShards(t *testing.T, c *client.Client, shards []string, rounds int) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for round := range rounds {
		for _, shard := range shards {
			id := fmt.Sprintf("r%d", round)
			if _, err := c.Append(ctx, shard, []*rolloutv1.Record{{Id: id}}); err != nil {
				t.Fatalf("Append(%s): %v", shard, err)
			}
			if _, err := c.Get(ctx, shard, id); err != nil {
				t.Fatalf("Get(%s): %v", shard, err)
			}
		}
	}
}

func shardNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("exp-%d/actor-%d", i%7, i)
	}
	return out
}

// With affinity, Append, Get and Scan for one shard always reach the same
// server, with the shard in the header, and the shards spread over both
// servers.
func TestAffinityRoutesEachShardToOneServer(t *testing.T) {
	a, b := newFakeServer("A"), newFakeServer("B")
	c, _ := dialAffine(t, endpoints(startFake(t, a), startFake(t, b)))
	shards := shardNames(200)
	const rounds = 3
	callShards(t, c, shards, rounds)
	ctx := ctxFor(t, 30*time.Second)
	scanned := map[string]bool{}
	for _, s := range shards[:20] {
		if _, err := collectErr(c.Scan(ctx, s)); err != nil {
			t.Fatalf("Scan(%s): %v", s, err)
		}
		scanned[s] = true
	}

	perServer := map[string]int{}
	for _, s := range shards {
		na, nb := a.served()[s], b.served()[s]
		want := 2 * rounds
		if scanned[s] {
			want++
		}
		switch {
		case na > 0 && nb > 0:
			t.Errorf("shard %q reached both servers (%d, %d requests)", s, na, nb)
		case na+nb != want:
			t.Errorf("shard %q: %d requests served, want %d", s, na+nb, want)
		case na > 0:
			perServer["A"]++
		default:
			perServer["B"]++
		}
	}
	for _, name := range []string{"A", "B"} {
		if perServer[name] < len(shards)/4 {
			t.Errorf("server %s owns %d of %d shards; ring_hash should spread them", name, perServer[name], len(shards))
		}
	}
	for _, f := range []*fakeServer{a, b} {
		f.mu.Lock()
		for shard, vals := range f.header {
			for _, v := range vals {
				if v != shard {
					t.Errorf("server %s: shard %q arrived with %s=%q", f.name, shard, client.ShardHeader, v)
				}
			}
		}
		f.mu.Unlock()
	}
	t.Logf("%d shards x %d rounds x (Append+Get), and 20 Scans: A owns %d shards, B %d; no shard reached both",
		len(shards), rounds, perServer["A"], perServer["B"])
}

// sweep calls every shard once and returns which server served each; a
// shard served by two servers fails the test.
func sweep(t *testing.T, c *client.Client, shards []string, fakes ...*fakeServer) map[string]string {
	t.Helper()
	before := make([]map[string]int, len(fakes))
	for i, f := range fakes {
		before[i] = f.served()
	}
	callShards(t, c, shards, 1)
	owner := map[string]string{}
	for i, f := range fakes {
		after := f.served()
		for _, s := range shards {
			if after[s] == before[i][s] {
				continue
			}
			if prev, ok := owner[s]; ok {
				t.Errorf("shard %q reached both %s and %s in one sweep", s, prev, f.name)
			}
			owner[s] = f.name
		}
	}
	return owner
}

func count(owner map[string]string, name string) int {
	n := 0
	for _, o := range owner {
		if o == name {
			n++
		}
	}
	return n
}

// When pods join or leave the headless Service, routing settles again on
// one server per shard, and only a fraction of the shards move. gRPC's ring
// keeps its size (minRingSize) and gives each of N pods 1/N of its entries,
// so a change moves the ideal share |N'-N|/max(N,N') plus some churn between
// pods that stayed (measured over 20 runs: 1.1-1.6x the ideal); the test
// allows 2x. Hashing modulo N would move N/(N+1).
func TestAffinityScalingMovesAFractionOfTheShards(t *testing.T) {
	var fakes []*fakeServer
	var addrs []string
	for i := range 4 {
		f := newFakeServer(fmt.Sprint("S", i))
		fakes = append(fakes, f)
		addrs = append(addrs, startFake(t, f))
	}
	c, r := dialAffine(t, endpoints(addrs[:2]...))
	shards := shardNames(300)

	prev := sweep(t, c, shards, fakes...)
	n := 2
	for _, m := range []int{3, 4, 3} {
		r.UpdateState(endpoints(addrs[:m]...))
		// Settled: the last server is in use after a scale-up, out of use
		// after a scale-down (the channel applies updates asynchronously).
		last := fakes[max(n, m)-1].name
		deadline := time.Now().Add(10 * time.Second)
		for (count(sweep(t, c, shards, fakes...), last) > 0) != (m > n) {
			if time.Now().After(deadline) {
				t.Fatal("the channel did not pick up the resolver update within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cur := sweep(t, c, shards, fakes...)
		moved := 0
		for _, s := range shards {
			if cur[s] != prev[s] {
				moved++
			}
		}
		frac := float64(moved) / float64(len(shards))
		ideal := float64(max(m-n, n-m)) / float64(max(n, m))
		t.Logf("%d -> %d pods: %d of %d shards moved (%.0f%%; ideal %.0f%%)", n, m, moved, len(shards), 100*frac, 100*ideal)
		if frac > 2*ideal {
			t.Errorf("%d -> %d pods moved %.0f%% of the shards, more than twice the ideal %.0f%%", n, m, 100*frac, 100*ideal)
		}
		prev, n = cur, m
	}
}

// An Append that fails without details is resent with the same
// request_id, and the caller's records are left alone.
func TestRetriesCarryOneRequestID(t *testing.T) {
	a := newFakeServer("A")
	a.failFirst = true
	c, _ := dialAffine(t, endpoints(startFake(t, a)))
	ctx := ctxFor(t, 30*time.Second)
	recs := []*rolloutv1.Record{{Content: "no id"}}
	if _, err := c.Append(ctx, "exp-1/actor-1", recs); err != nil {
		t.Fatalf("Append after one UNAVAILABLE: %v", err)
	}
	if _, err := c.Append(ctx, "exp-1/actor-2", recs, client.WithRequestID("mine-1")); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	got, kept := a.reqIDs["exp-1/actor-1"], a.reqIDs["exp-1/actor-2"]
	a.mu.Unlock()
	if len(got) != 2 || got[0] == "" || got[0] != got[1] {
		t.Errorf("attempts carried request_ids %q, want two equal, non-empty ones", got)
	}
	if fmt.Sprint(kept) != "[mine-1 mine-1]" {
		t.Errorf("a caller's request_id arrived as %q, want [mine-1 mine-1] (two attempts)", kept)
	}
	if recs[0].GetId() != "" || len(recs) != 1 {
		t.Errorf("the caller's records changed: %v", recs)
	}
}

// An Append whose first attempt may have landed (OUTCOME_UNKNOWN) and
// whose later attempts are refused (NOT_COMMITTED) until its retries run
// out ends OUTCOME_UNKNOWN: the last attempt speaks only for itself.
func TestAnEarlierUnknownOutlivesLaterRefusals(t *testing.T) {
	a := newFakeServer("A")
	reason := func(code codes.Code, r string) error {
		st, err := status.New(code, r).WithDetails(&errdetails.ErrorInfo{Domain: client.ErrorDomain, Reason: r})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	a.answers = []error{reason(codes.Unavailable, client.ReasonOutcomeUnknown)}
	for range 10 {
		a.answers = append(a.answers, reason(codes.Unavailable, client.ReasonNotCommitted))
	}
	c, _ := dialAffine(t, endpoints(startFake(t, a)))
	_, err := c.Append(ctxFor(t, 30*time.Second), "exp-1/actor-1", []*rolloutv1.Record{{Id: "r1"}})
	if !errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrNotCommitted) {
		t.Fatalf("Append: %v, want ErrOutcomeUnknown and not ErrNotCommitted", err)
	}
}
