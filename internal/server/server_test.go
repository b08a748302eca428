package server

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// testServer is a Server on a bufconn listener with a connected client.
type testServer struct {
	*Server
	conn   *grpc.ClientConn
	client rolloutv1.RolloutServiceClient
	served chan error
}

func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	if cfg.Writer.Logger == nil {
		cfg.Writer = testWriterOptions(t)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	ts := &testServer{Server: s, served: make(chan error, 1)}
	go func() { ts.served <- s.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	ts.conn = conn
	ts.client = rolloutv1.NewRolloutServiceClient(conn)
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

// stop shuts the server down (once) and waits for Serve to return.
func (ts *testServer) stop(t testing.TB) {
	if ts.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts.Shutdown(ctx)
	if err := <-ts.served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	ts.conn.Close()
	ts.conn = nil
}

func nan() *float32 { v := float32(math.NaN()); return &v }

// Bad requests are refused with the right code and a message naming the
// problem, before anything is written.
func TestAppendRejects(t *testing.T) {
	store := faultstore.New(memstore.New(), 1) // counts the writes that reach storage
	ts := startServer(t, Config{Store: store, MaxBatchRecords: 3, MaxRecordBytes: 1000, MaxMessageBytes: 4000})
	big := strings.Repeat("x", 2000)
	tests := []struct {
		name string
		req  *rolloutv1.AppendRequest
		code codes.Code
		msg  string
	}{
		{"empty shard", &rolloutv1.AppendRequest{Records: []*rolloutv1.Record{record("a")}}, codes.InvalidArgument, "shard"},
		{"dot-dot shard", &rolloutv1.AppendRequest{Shard: "a/../b", Records: []*rolloutv1.Record{record("a")}}, codes.InvalidArgument, "shard"},
		{"leading slash", &rolloutv1.AppendRequest{Shard: "/a", Records: []*rolloutv1.Record{record("a")}}, codes.InvalidArgument, "shard"},
		{"upper case shard", &rolloutv1.AppendRequest{Shard: "Exp1", Records: []*rolloutv1.Record{record("a")}}, codes.InvalidArgument, "shard"},
		{"empty batch", &rolloutv1.AppendRequest{Shard: "s"}, codes.InvalidArgument, "records"},
		{"duplicate ids", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a"), record("a")}}, codes.InvalidArgument, "records[1].id"},
		{"bad id", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a b")}}, codes.InvalidArgument, "records[0].id"},
		{"NaN reward", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{{Id: "a", Reward: nan()}}}, codes.InvalidArgument, "records[0].reward"},
		{"unknown role", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{{Id: "a", Role: 99}}}, codes.InvalidArgument, "records[0].role"},
		{"NaN relationship weight", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{{Id: "a", Relationships: []*rolloutv1.Relationship{{TargetId: "b", Weight: *nan()}}}}}, codes.InvalidArgument, "records[0].relationships[0].weight"},
		{"loss mask length", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{{Id: "a", OutputTokens: []int32{1, 2}, LossMask: []byte{1}}}}, codes.InvalidArgument, "loss_mask"},
		{"too many records", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a"), record("b"), record("c"), record("d")}}, codes.ResourceExhausted, "at most 3"},
		{"record too large", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{{Id: "a", Content: big}}}, codes.ResourceExhausted, "per record; shrink the record, or raise the server's --max-record-bytes"},
		{"message too large", &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{{Id: "a", Content: big}, {Id: "b", Content: big}, {Id: "c", Content: big}}}, codes.ResourceExhausted, "larger than max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ts.client.Append(context.Background(), tt.req)
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("got %v %q, want %v mentioning %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
	if n := store.Calls(faultstore.OpPut) + store.Calls(faultstore.OpDelete); n != 0 {
		t.Errorf("rejected requests wrote %d times to storage", n)
	}
	page, err := store.List(context.Background(), blob.ListOptions{})
	if err != nil || len(page.Items) != 0 {
		t.Errorf("storage holds %d blobs after rejected requests (err %v)", len(page.Items), err)
	}
}

func TestGetRejectsAndNotFound(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("a")}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  *rolloutv1.GetRequest
		code codes.Code
		msg  string
	}{
		{"bad shard", &rolloutv1.GetRequest{Shard: "A", Id: "a"}, codes.InvalidArgument, "shard"},
		{"empty id", &rolloutv1.GetRequest{Shard: "s"}, codes.InvalidArgument, "id"},
		{"unknown shard", &rolloutv1.GetRequest{Shard: "never", Id: "a"}, codes.NotFound, `"never"`},
		{"unknown id", &rolloutv1.GetRequest{Shard: "s", Id: "zz"}, codes.NotFound, `"zz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ts.client.Get(ctx, tt.req)
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("got %v %q, want %v mentioning %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
		})
	}
}

// Append assigns missing ids and created_at, acks with seq, epoch and
// generation, and Get returns exactly what was acked.
func TestAppendThenGet(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	resp, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "exp/r1", Records: []*rolloutv1.Record{
		record("a"), {Content: "no id"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.GetResults()
	if len(rs) != 2 || rs[0].GetId() != "a" || rs[1].GetId() == "" || rs[0].GetSeq() != 1 || rs[1].GetSeq() != 2 || rs[0].GetEpoch() == 0 || rs[0].GetGeneration() == 0 {
		t.Fatalf("results %v", rs)
	}
	for _, r := range rs {
		got, err := ts.client.Get(ctx, &rolloutv1.GetRequest{Shard: "exp/r1", Id: r.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		rec := got.GetRecord()
		if rec.GetId() != r.GetId() || rec.GetSeq() != r.GetSeq() || rec.GetCreatedAt() == nil {
			t.Errorf("Get %q: %v", r.GetId(), rec)
		}
	}
}

// getFails fails reads of shard "s" with err.
func getFails(err error) func(context.Context, faultstore.Call) error {
	return func(context.Context, faultstore.Call) error { return err }
}

// getBlocks blocks reads of shard "s" until their context ends.
func getBlocks(ctx context.Context, _ faultstore.Call) error {
	<-ctx.Done()
	return ctx.Err()
}

// getsDo returns a store whose reads of shard "s" do what get does.
func getsDo(get func(context.Context, faultstore.Call) error) *faultstore.Store {
	s := faultstore.New(memstore.New(), 1)
	s.Intercept(faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: format.ShardPrefix("s")}, get)
	return s
}

func TestStorageErrorsMapToCodes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		get  func(context.Context, faultstore.Call) error // what a read of shard "s" does
		code codes.Code
		msg  string
	}{
		{"unavailable", getFails(blob.ErrUnavailable), codes.Unavailable, "unavailable; retry"},
		{"unclassified", getFails(errors.New("disk on fire")), codes.Internal, "internal error; the server logged the details under request id "},
		{"panic", func(context.Context, faultstore.Call) error { panic("injected panic in Get") }, codes.Internal, "internal error in Get"},
		{"default deadline", getBlocks, codes.DeadlineExceeded, "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startServer(t, Config{Store: getsDo(tt.get), DefaultDeadline: 50 * time.Millisecond})
			_, err := ts.client.Get(ctx, &rolloutv1.GetRequest{Shard: "s", Id: "a"})
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("got %v %q, want %v mentioning %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
			// The server survives and keeps serving.
			if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "other", Records: []*rolloutv1.Record{record("a")}}); err != nil {
				t.Errorf("Append after the failed Get: %v", err)
			}
		})
	}
}

// A generation that vanished from storage under a manifest that lists it is
// an internal inconsistency (Internal), not the client's NotFound; bytes that
// fail their checksum are DataLoss. Both name the blob in the log only
// (errors_leak_test.go).
func TestStoredDataProblems(t *testing.T) {
	mem := memstore.New()
	ts := startServer(t, Config{Store: mem})
	ctx := context.Background()
	if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "gone", Records: []*rolloutv1.Record{record("a")}}); err != nil {
		t.Fatal(err)
	}
	// Under protocol v2 the manifest lists the record's log position once
	// a checkpoint covers it (within the checkpoint interval).
	var gens []*storagepb.Generation
	for deadline := time.Now().Add(10 * time.Second); len(gens) == 0; time.Sleep(5 * time.Millisecond) {
		data, _, err := mem.Get(ctx, format.ManifestName("gone"), blob.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := format.DecodeManifest(data)
		if err != nil {
			t.Fatal(err)
		}
		if gens = m.GetGenerations(); len(gens) == 0 && time.Now().After(deadline) {
			t.Fatal("no checkpoint lists the record")
		}
	}
	for _, g := range gens {
		if err := mem.Delete(ctx, format.KeyOf(g).Blob("gone"), blob.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ts.client.Get(ctx, &rolloutv1.GetRequest{Shard: "gone", Id: "a"})
	if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "request id") {
		t.Errorf("Get with its generation deleted: %v %q, want Internal", st.Code(), st.Message())
	}

	if _, err := mem.Put(ctx, format.ManifestName("junk"), []byte("not a manifest"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = ts.client.Get(ctx, &rolloutv1.GetRequest{Shard: "junk", Id: "a"})
	if st := status.Convert(err); st.Code() != codes.DataLoss || !strings.Contains(st.Message(), "request id") {
		t.Errorf("Get of a corrupt manifest: %v %q, want DataLoss with a request id", st.Code(), st.Message())
	}
}

// Health reports SERVING, then NOT_SERVING as soon as shutdown starts,
// while the drain delay still serves requests. Reflection lists the service.
func TestHealthReflectionAndDrain(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New(), DrainDelay: 300 * time.Millisecond})
	ctx := context.Background()
	hc := healthpb.NewHealthClient(ts.conn)
	for _, svc := range []string{"", "rollout.v1.RolloutService"} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, resp, err)
		}
	}

	rc, err := reflectionpb.NewServerReflectionClient(ts.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	rr, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "rollout.v1.RolloutService") || !strings.Contains(got, "grpc.health.v1.Health") {
		t.Errorf("reflection lists %s", got)
	}
	// An open stream (this reflection stream, a health Watch) must not
	// hold the graceful stop: Shutdown cancels streams.

	done := make(chan struct{})
	go func() {
		defer close(done)
		ts.stop(t)
	}()
	waitFor(t, func() bool {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "rollout.v1.RolloutService"})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	// Still draining: requests are served.
	if _, err := ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{record("during-drain")}}); err != nil {
		t.Errorf("Append during the drain delay: %v", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not finish: an open stream held the graceful stop")
	}
}

// /metrics exposes the server's and the process's metrics; /debug/pprof
// answers only when asked for.
func TestDebugHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServer(t, Config{Store: memstore.New(), Registerer: reg})
	if _, err := appendOne(context.Background(), ts.client, "m", "a"); err != nil {
		t.Fatal(err)
	}
	h := DebugHandler(reg, true)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, name := range []string{
		"rolloutd_rpc_duration_seconds_bucket{code=\"OK\",method=\"Append\"",
		"rolloutd_records_appended_total 1",
		"rolloutd_bytes_appended_total",
		"rolloutd_append_generations_bucket",
		"rolloutd_writers_resident 1",
		"rolloutd_writer_opens_total 1",
		"rolloutd_writer_evictions_total 0",
		"rolloutd_writer_fences_total 0",
		"rolloutd_append_self_heals_total 0",
		"rolloutd_writer_queued_bytes 0",
		"rolloutd_index_cache_bytes",
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Errorf("/debug/pprof/: %d", rec.Code)
	}

	off := DebugHandler(reg, false)
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/profile", "/debug/pprof/heap"} {
		rec = httptest.NewRecorder()
		off.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s without pprof: %d, want 404", p, rec.Code)
		}
	}
	rec = httptest.NewRecorder()
	off.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "rolloutd_records_appended_total 1") {
		t.Errorf("/metrics without pprof: %d", rec.Code)
	}
}

// Appending an id again is idempotent with the same content, and refused
// AlreadyExists with different content.
func TestAppendSameIDAgain(t *testing.T) {
	ts := startServer(t, Config{Store: memstore.New()})
	ctx := context.Background()
	first, err := appendOne(ctx, ts.client, "idem", "a")
	if err != nil {
		t.Fatal(err)
	}
	again, err := appendOne(ctx, ts.client, "idem", "a")
	if err != nil {
		t.Fatalf("same id, same content: %v", err)
	}
	if !again.GetAlreadyPresent() || again.GetSeq() != first.GetSeq() {
		t.Errorf("retry of a landed append: %v, want already_present with seq %d", again, first.GetSeq())
	}
	changed := record("a")
	changed.Content = "something else"
	_, err = ts.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "idem", Records: []*rolloutv1.Record{changed}})
	if st := status.Convert(err); st.Code() != codes.AlreadyExists || !strings.Contains(st.Message(), `"a"`) {
		t.Errorf("same id, different content: %v %q, want AlreadyExists naming the id", st.Code(), st.Message())
	}
}
