package affine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"github.com/rolloutd/rolloutd/examples/affine"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeServer is a RolloutService that records which shards it served. It
// stores nothing; routing is all these tests look at.
type fakeServer struct {
	rolloutv1.UnimplementedRolloutServiceServer
	name string

	mu     sync.Mutex
	shards map[string]int      // shard -> requests served
	header map[string][]string // shard -> ShardHeader values seen
	ids    map[string][]string // shard -> record ids of every Append attempt
	reqIDs map[string][]string // shard -> request_id of every Append attempt
	// failFirst answers UNAVAILABLE to the first Append attempt per shard.
	failFirst bool
	failed    map[string]bool
}

func newFakeServer(name string) *fakeServer {
	return &fakeServer{name: name, shards: map[string]int{}, header: map[string][]string{},
		ids: map[string][]string{}, reqIDs: map[string][]string{}, failed: map[string]bool{}}
}

func (s *fakeServer) record(ctx context.Context, shard string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shards[shard]++
	s.header[shard] = append(s.header[shard], md.Get(affine.ShardHeader)...)
}

func (s *fakeServer) Append(ctx context.Context, req *rolloutv1.AppendRequest) (*rolloutv1.AppendResponse, error) {
	s.record(ctx, req.GetShard())
	s.mu.Lock()
	for _, r := range req.GetRecords() {
		s.ids[req.GetShard()] = append(s.ids[req.GetShard()], r.GetId())
	}
	s.reqIDs[req.GetShard()] = append(s.reqIDs[req.GetShard()], req.GetRequestId())
	fail := s.failFirst && !s.failed[req.GetShard()]
	s.failed[req.GetShard()] = true
	s.mu.Unlock()
	if fail {
		return nil, status.Errorf(codes.Unavailable, "shard %q: fenced; retry with the same ids", req.GetShard())
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
	return stream.Send(&rolloutv1.ScanResponse{})
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

// startServer serves fake on a loopback port until the test ends.
func startServer(t *testing.T, fake *fakeServer) string {
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

// dial connects through affine.NewClient, exactly as a real client does,
// except that a manual resolver stands in for DNS. The resolver reports no
// service config, so the channel uses affine.ServiceConfig.
func dial(t *testing.T, st resolver.State) (*grpc.ClientConn, *manual.Resolver) {
	t.Helper()
	r := manual.NewBuilderWithScheme("affinetest")
	r.InitialState(st)
	cc, err := affine.NewClient(r.Scheme()+":///rolloutd",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc, r
}

// owners maps each shard to the one server that served it, and fails the
// test if any shard reached two servers.
func owners(t *testing.T, fakes ...*fakeServer) map[string]string {
	t.Helper()
	owner := map[string]string{}
	for _, f := range fakes {
		for shard := range f.served() {
			if prev, ok := owner[shard]; ok {
				t.Errorf("shard %q reached both %s and %s", shard, prev, f.name)
			}
			owner[shard] = f.name
		}
	}
	return owner
}

func callShards(t *testing.T, client rolloutv1.RolloutServiceClient, shards []string, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range rounds {
		for _, shard := range shards {
			id := fmt.Sprintf("r%d", round)
			if _, err := client.Append(ctx, &rolloutv1.AppendRequest{Shard: shard,
				Records: []*rolloutv1.Record{{Id: id}}}); err != nil {
				t.Fatalf("Append(%s): %v", shard, err)
			}
			if _, err := client.Get(ctx, &rolloutv1.GetRequest{Shard: shard, Id: id}); err != nil {
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

// TestEveryRequestForAShardLandsOnOneServer is the routing contract: with the
// published service config, Append and Get for one shard always reach the
// same server, and different shards spread over both.
func TestEveryRequestForAShardLandsOnOneServer(t *testing.T) {
	a, b := newFakeServer("A"), newFakeServer("B")
	cc, _ := dial(t, endpoints(startServer(t, a), startServer(t, b)))
	client := rolloutv1.NewRolloutServiceClient(cc)

	shards := shardNames(200)
	const rounds = 5
	callShards(t, client, shards, rounds)

	owner := owners(t, a, b)
	if len(owner) != len(shards) {
		t.Fatalf("%d shards served, want %d", len(owner), len(shards))
	}
	perServer := map[string]int{}
	for _, s := range shards {
		perServer[owner[s]]++
		got := a.served()[s] + b.served()[s]
		if got != 2*rounds {
			t.Errorf("shard %q: %d requests served, want %d", s, got, 2*rounds)
		}
	}
	t.Logf("%d shards x %d rounds x (Append+Get): A owns %d shards, B owns %d; no shard reached both",
		len(shards), rounds, perServer["A"], perServer["B"])

	// A Scan stream, with the header from affine.WithShard, reaches the
	// same server as the shard's Appends and Gets.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range shards[:20] {
		stream, err := client.Scan(affine.WithShard(ctx, s), &rolloutv1.ScanRequest{Shard: s})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("Scan(%s): %v", s, err)
		}
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
	}
	for _, s := range shards[:20] {
		if got := a.served()[s] + b.served()[s]; got != 2*rounds+1 {
			t.Errorf("shard %q: %d requests served after a Scan, want %d", s, got, 2*rounds+1)
		}
	}
	owners(t, a, b) // fails the test if a Scan reached the other server
	for _, name := range []string{"A", "B"} {
		if perServer[name] < len(shards)/4 {
			t.Errorf("server %s owns %d of %d shards; ring_hash should spread them", name, perServer[name], len(shards))
		}
	}

	// The header the ring hashed is the request's shard.
	for _, f := range []*fakeServer{a, b} {
		f.mu.Lock()
		for shard, vals := range f.header {
			for _, v := range vals {
				if v != shard {
					t.Errorf("server %s: shard %q arrived with %s=%q", f.name, shard, affine.ShardHeader, v)
				}
			}
		}
		f.mu.Unlock()
	}
}

// sweep calls every shard once and returns which server served each; a
// shard served by two servers fails the test.
func sweep(t *testing.T, client rolloutv1.RolloutServiceClient, shards []string, fakes ...*fakeServer) map[string]string {
	t.Helper()
	before := make([]map[string]int, len(fakes))
	for i, f := range fakes {
		before[i] = f.served()
	}
	callShards(t, client, shards, 1)
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

// converge sweeps until the channel routes by the resolver's latest answer:
// until ok accepts a sweep (the channel applies resolver updates
// asynchronously).
func converge(t *testing.T, client rolloutv1.RolloutServiceClient, shards []string, ok func(map[string]string) bool, fakes ...*fakeServer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(sweep(t, client, shards, fakes...)) {
		if time.Now().After(deadline) {
			t.Fatal("the channel did not pick up the resolver update within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// TestScalingMovesAFractionOfTheShards: when pods join or leave the headless
// Service, routing settles again on one server per shard, and only a
// fraction of the shards move. gRPC's ring keeps its size (minRingSize) and
// gives each of N pods 1/N of its entries, so a change moves the ideal
// share |N'-N|/max(N,N') plus some churn between pods that stayed (measured
// here over 20 runs: 1.1-1.6x the ideal); the test allows 2x. Hashing
// modulo N would move N/(N+1).
func TestScalingMovesAFractionOfTheShards(t *testing.T) {
	var fakes []*fakeServer
	var addrs []string
	for i := range 4 {
		f := newFakeServer(fmt.Sprint("S", i))
		fakes = append(fakes, f)
		addrs = append(addrs, startServer(t, f))
	}
	cc, r := dial(t, endpoints(addrs[:2]...))
	client := rolloutv1.NewRolloutServiceClient(cc)
	shards := shardNames(300)

	prev := sweep(t, client, shards, fakes...)
	n := 2
	for _, m := range []int{3, 4, 3} {
		r.UpdateState(endpoints(addrs[:m]...))
		// Settled: the last server is in use after a scale-up, out of use
		// after a scale-down.
		last := fakes[max(n, m)-1].name
		converge(t, client, shards, func(o map[string]string) bool { return (count(o, last) > 0) == (m > n) }, fakes...)
		cur := sweep(t, client, shards, fakes...)
		moved := 0
		for _, s := range shards {
			if cur[s] != prev[s] {
				moved++
			}
		}
		frac := float64(moved) / float64(len(shards))
		ideal := float64(max(m-n, n-m)) / float64(max(n, m))
		t.Logf("%d -> %d pods: %d of %d shards moved (%.0f%%; ideal %.0f%%, modulo-N hashing %.0f%%)",
			n, m, moved, len(shards), 100*frac, 100*ideal, 100*float64(min(n, m))/float64(max(n, m)))
		if frac > 2*ideal {
			t.Errorf("%d -> %d pods moved %.0f%% of the shards, more than twice the ideal %.0f%%", n, m, 100*frac, 100*ideal)
		}
		prev, n = cur, m
	}
}

// TestUnavailableIsRetriedWithTheSameIDs: the published retry policy retries
// an Append that failed with UNAVAILABLE, resending the same record ids.
func TestUnavailableIsRetriedWithTheSameIDs(t *testing.T) {
	a := newFakeServer("A")
	a.failFirst = true
	cc, _ := dial(t, endpoints(startServer(t, a)))
	client := rolloutv1.NewRolloutServiceClient(cc)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := client.Append(ctx, &rolloutv1.AppendRequest{Shard: "exp-1/actor-1",
		Records: []*rolloutv1.Record{{Id: "turn-0001"}, {Id: "turn-0002"}}})
	if err != nil {
		t.Fatalf("Append after one UNAVAILABLE: %v (the retry policy should have retried it)", err)
	}
	if len(resp.GetResults()) != 2 {
		t.Fatalf("results = %v", resp.GetResults())
	}
	a.mu.Lock()
	ids := a.ids["exp-1/actor-1"]
	a.mu.Unlock()
	want := []string{"turn-0001", "turn-0002", "turn-0001", "turn-0002"}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("the server saw ids %v, want %v (two attempts, same ids)", ids, want)
	}
	t.Logf("attempts seen by the server: %v", ids)
}

// TestRetriesCarryOneRequestID: an Append without a request_id gets one
// before its first attempt, and the channel's retry resends that same
// request_id, so the server derives the same ids for records sent without
// one. The caller's request is left alone, and a request_id it set is kept.
func TestRetriesCarryOneRequestID(t *testing.T) {
	a := newFakeServer("A")
	a.failFirst = true
	cc, _ := dial(t, endpoints(startServer(t, a)))
	client := rolloutv1.NewRolloutServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	req := &rolloutv1.AppendRequest{Shard: "exp-1/actor-1", Records: []*rolloutv1.Record{{Content: "no id"}}}
	if _, err := client.Append(ctx, req); err != nil {
		t.Fatalf("Append after one UNAVAILABLE: %v", err)
	}
	if req.GetRequestId() != "" {
		t.Errorf("the interceptor set request_id %q on the caller's request", req.GetRequestId())
	}
	if _, err := client.Append(ctx, &rolloutv1.AppendRequest{Shard: "exp-1/actor-2", RequestId: "mine-1", Records: []*rolloutv1.Record{{}}}); err != nil {
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
	t.Logf("request_id of both attempts: %s", got[0])
}

// TestPublishedServiceConfigMatches keeps deploy/client/service-config.json
// and affine.ServiceConfig the same document, keyed on affine.ShardHeader.
func TestPublishedServiceConfigMatches(t *testing.T) {
	published, err := os.ReadFile(filepath.Join("..", "..", "deploy", "client", "service-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := json.Compact(&a, published); err != nil {
		t.Fatalf("deploy/client/service-config.json: %v", err)
	}
	if err := json.Compact(&b, []byte(affine.ServiceConfig)); err != nil {
		t.Fatalf("affine.ServiceConfig: %v", err)
	}
	if a.String() != b.String() {
		t.Fatalf("deploy/client/service-config.json differs from affine.ServiceConfig:\n%s\n%s", a.String(), b.String())
	}
	var sc struct {
		LoadBalancingConfig []map[string]struct {
			RequestHashHeader string `json:"requestHashHeader"`
		} `json:"loadBalancingConfig"`
	}
	if err := json.Unmarshal(published, &sc); err != nil {
		t.Fatal(err)
	}
	if len(sc.LoadBalancingConfig) != 1 || sc.LoadBalancingConfig[0]["ring_hash_experimental"].RequestHashHeader != affine.ShardHeader {
		t.Fatalf("the service config must select ring_hash_experimental keyed on %q: %s", affine.ShardHeader, published)
	}
}
